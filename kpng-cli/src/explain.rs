//! `kpng … explain`: what this node does with one packet, from the state
//! the source gives (a manifest file, the API's lists, a server's ENLS).

use kpng_explain::{DataPath, Origin, Packet, Protocol, Setup};

use crate::Error;
use crate::args::ExplainArgs;

/// The packet and the settings these flags describe.
fn setup(args: &ExplainArgs) -> Result<(Setup, Packet), Error> {
    let origin: Origin = args
        .from
        .parse()
        .map_err(|e: kpng_explain::Error| Error::Usage(format!("invalid --from: {e}")))?;
    let protocol: Protocol = args
        .protocol
        .parse()
        .map_err(|e: kpng_explain::Error| Error::Usage(format!("invalid --protocol: {e}")))?;
    let tc = args.tc || !args.tc_interfaces.is_empty();
    let data_path = match args.backend.as_str() {
        "ebpf" => DataPath::Ebpf {
            tc,
            netfilter: args.north_south == "nft",
        },
        _ if tc => {
            return Err(Error::Usage(format!(
                "{} goes with --backend ebpf (its tc programs)",
                if args.tc { "--tc" } else { "--tc-interfaces" }
            )));
        }
        "iptables" => DataPath::Iptables,
        _ => DataPath::Nftables,
    };
    let mut packet = Packet::new(origin, protocol, args.source, args.destination, args.port);
    if let Some(port) = args.source_port {
        packet = packet.from_port(port);
    }
    let mut setup = Setup::new(args.proxy.proxy()?, data_path)
        .localhost_nodeports(args.proxy.localhost_nodeports());
    if !args.tc_interfaces.is_empty() {
        setup = setup.with_tc_routes(tc_routes(&args.tc_interfaces)?);
    }
    Ok((setup, packet))
}

/// The node's routes, asked as the eBPF backend asks them: the interface
/// without tc programs an endpoint's route leaves by. A tc interface this
/// node does not have is an error naming it (a mistyped name would make
/// every endpoint look reached around the programs).
fn tc_routes(
    interfaces: &[String],
) -> Result<impl Fn(std::net::IpAddr) -> Option<String> + Send + Sync + 'static, Error> {
    let indexes = kpng_netfilter::routes::interface_indexes(None, interfaces)
        .map_err(|e| Error::Usage(format!("--tc-interfaces: {e}")))?;
    let missing: Vec<&str> = interfaces
        .iter()
        .zip(&indexes)
        .filter(|(_, index)| index.is_none())
        .map(|(name, _)| name.as_str())
        .collect();
    if !missing.is_empty() {
        return Err(Error::Usage(format!(
            "--tc-interfaces names {} that this node does not have: {}",
            if missing.len() == 1 {
                "an interface"
            } else {
                "interfaces"
            },
            missing.join(", ")
        )));
    }
    let routes = kpng_backend_ebpf::TcRoutes::new(None, interfaces)
        .map_err(|e| Error::Usage(format!("--tc-interfaces: {e}")))?;
    Ok(move |endpoint| match routes.around(&[endpoint]) {
        Ok(found) => found.into_iter().next().flatten(),
        Err(e) => Some(format!("unknown (the route could not be asked: {e})")),
    })
}

/// Explains the packet at the state `reader` holds once every kind is
/// listed, and prints it (text or JSON) on standard output.
pub(crate) async fn run(
    mut reader: kpng_store::Reader,
    node: &str,
    args: &ExplainArgs,
) -> Result<(), Error> {
    let (setup, packet) = setup(args)?;
    let snapshot = reader
        .listed(&kpng_drive::DriveConfig::default().wait_for)
        .await
        .map_err(|_| {
            Error::Usage("the source ended before the cluster state was listed whole".into())
        })?;
    print(&snapshot, node, &setup, &packet, args)
}

/// Explains and prints.
pub(crate) fn print(
    snapshot: &kpng_store::Snapshot,
    node: &str,
    setup: &Setup,
    packet: &Packet,
    args: &ExplainArgs,
) -> Result<(), Error> {
    let explained = kpng_explain::explain(snapshot, node, setup, packet)?;
    if args.output == "json" {
        let json = serde_json::to_string_pretty(&explained)
            .map_err(|e| Error::Usage(format!("the explanation as JSON: {e}")))?;
        println!("{json}");
    } else {
        println!("{explained}");
    }
    Ok(())
}

/// Explains the packet at a server's ENLS (its global watch, mirrored
/// once).
pub(crate) async fn from_server(
    address: &kpng_api::Address,
    node: &str,
    args: &ExplainArgs,
) -> Result<(), Error> {
    let (setup, packet) = setup(args)?;
    let mut store = kpng_store::Store::new();
    let mut config = kpng_api::AgentConfig::default();
    config.once = true;
    config.once_attempts = crate::ONCE_ATTEMPTS;
    kpng_api::run_mirror(address, &mut store, &config).await?;
    print(&store.snapshot(), node, &setup, &packet, args)
}
