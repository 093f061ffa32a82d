//! Decoding one node's full view, as an agent does, at 10k Services × 10
//! endpoints (the fan-out bench's cluster: each endpoint on a node drawn
//! by a hash of its number).
//!
//! The view's messages are taken from a [`Server`] (through the `Enls`
//! trait, each a `WatchEvent`) and encoded to bytes, as they travel, in
//! both forms of endpoints: `messages` (a `CompactEndpoint` each, what
//! watchers that do not ask for columns get) and `columns`
//! (`EndpointColumns`, what the agent asks for). Then, per view and
//! form, timed (this thread's CPU time) over `--views` distinct nodes' views (3 rounds, the
//! last 2 printed):
//!
//! 1. `prost`: the bytes decoded into the generated types only;
//! 2. `ops`: and the compact batches decoded into view ops, a
//!    Service's endpoints together (`codec::compact::Decoder::batch_grouped`),
//!    dropped;
//! 3. `view, one op at a time`: and the ops applied to a node view one
//!    by one (`NodeView::apply`: the agent before columns);
//! 4. `view, as the agent`: the agent's path, each Service's endpoints
//!    applied together (`Decoder::batch_grouped`,
//!    `NodeView::set_endpoints`).
//!
//! ```text
//! cargo bench -p kpng-api --bench decode [-- --nodes 10000 --services 10000 --views 20 --level 0..3 --columns 0|1]
//! ```
#![allow(missing_docs, clippy::unwrap_used)]

use futures::StreamExt;
use kpng_api::Server;
use kpng_api::codec::compact::{Decoded, Decoder};
use kpng_model::Kind;
use kpng_model::v1::enls_server::Enls;
use kpng_model::v1::{WatchEvent, WatchRequest, watch_event::Event};
use kpng_model::view::NodeView;
use kpng_store::Store;
use kpng_testkit::Cluster;
use prost::Message as _;

/// This thread's CPU time so far, in seconds (/proc/thread-self/schedstat:
/// wall time would count the other processes of a busy machine).
fn cpu_s() -> f64 {
    let stat = std::fs::read_to_string("/proc/thread-self/schedstat").unwrap();
    let ns: u64 = stat.split_whitespace().next().unwrap().parse().unwrap();
    ns as f64 / 1e9
}

fn num(name: &str, default: usize) -> usize {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The messages of `node`'s full view, encoded.
async fn view_bytes(server: &Server, node: &str, columns: bool) -> Vec<Vec<u8>> {
    let request = tonic::Request::new(WatchRequest {
        node: node.into(),
        endpoint_columns: columns,
        ..Default::default()
    });
    let mut stream = server.watch(request).await.unwrap().into_inner();
    let mut messages = Vec::new();
    while let Some(event) = stream.next().await {
        let event = event.unwrap();
        let sync = matches!(event.event, Some(Event::Sync(_)));
        messages.push(event.encode_to_vec());
        if sync {
            break;
        }
    }
    messages
}

fn decode(messages: &[Vec<u8>], level: usize) -> usize {
    let (mut decoder, mut view, mut ops) = (Decoder::new(), NodeView::default(), 0);
    for bytes in messages {
        let event = WatchEvent::decode(bytes.as_slice()).unwrap();
        if level == 0 {
            ops += usize::from(event.event.is_some());
            continue;
        }
        if let Some(Event::Changes(changes)) = event.event {
            if level != 2 {
                decoder
                    .batch_grouped::<kpng_model::Error>(changes, |decoded| {
                        ops += 1;
                        match decoded {
                            _ if level == 1 => Ok(()),
                            Decoded::Op(op) => view.apply(&op),
                            Decoded::Endpoints(name, endpoints) => {
                                view.set_endpoints(&name, endpoints)
                            }
                        }
                    })
                    .unwrap();
                continue;
            }
            decoder
                .batch::<kpng_model::Error>(changes, |op| {
                    ops += 1;
                    if level == 2 {
                        view.apply(&op)?;
                    }
                    Ok(())
                })
                .unwrap();
        }
    }
    std::hint::black_box(&view);
    ops
}

fn main() {
    let services = num("--services", 10_000);
    let nodes = num("--nodes", 10_000);
    let views = num("--views", 20);
    let cluster = Cluster::fanout(services, nodes);
    let mut store = Store::new();
    cluster.load_into(&mut store);
    store.mark_listed(Kind::Service);
    store.mark_listed(Kind::Endpoint);
    drop(cluster);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let server = Server::new(store.reader());
    println!("kpng-api decode: {services} services x 10 endpoints, {nodes} nodes, {views} views");
    let only_level = num("--level", 9);
    let only_form = num("--columns", 9);
    for (columns, form) in [(false, "messages"), (true, "columns")] {
        if only_form != 9 && only_form != usize::from(columns) {
            continue;
        }
        let all: Vec<Vec<Vec<u8>>> = runtime.block_on(async {
            let mut all = Vec::new();
            for v in 0..views {
                all.push(view_bytes(&server, &format!("node-{}", v * 7 % nodes), columns).await);
            }
            all
        });
        let bytes: usize = all.iter().flatten().map(Vec::len).sum::<usize>() / views;
        println!(
            "endpoints as {form}: {:.2} MB per view ({} messages)",
            bytes as f64 / 1e6,
            all[0].len()
        );
        for (level, what) in [
            (0, "prost"),
            (1, "ops"),
            (2, "view, one op at a time"),
            (3, "view, as the agent"),
        ] {
            if only_level != 9 && only_level != level {
                continue;
            }
            let mut times = Vec::new();
            for round in 0..num("--rounds", 3) {
                let t0 = cpu_s();
                let mut ops = 0;
                for messages in &all {
                    ops += decode(messages, level);
                }
                let per = (cpu_s() - t0) * 1e3 / views as f64;
                if round > 0 || views == 1 {
                    times.push(per);
                }
                std::hint::black_box(ops);
            }
            let times: Vec<String> = times.iter().map(|t| format!("{t:.2}")).collect();
            println!("  {what}: {} ms of CPU per view", times.join(" / "));
        }
    }
}
