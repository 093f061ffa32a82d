//! `--config FILE` with kpng's own YAML, turned into the command line it
//! stands for (kube-proxy's `KubeProxyConfiguration` is
//! [`crate::kube_proxy`]'s).

use crate::args::Cli;

/// The command line a config file stands for. The file holds the source
/// (`source: kube`), its flags (`node: …`), the sink (`sink: to-nft`) and
/// the sink's flags (`flags: {cluster-cidr: …}`), with kube-proxy's flag
/// names. A string value may name environment variables (`${VAR}`),
/// expanded after the file is parsed, so a value cannot change the
/// document; an unset variable is an error that names it. A `true` flag is
/// given bare; a `false` one is left out, unless the flag takes a value
/// (`localhost-nodeports`, `nft-comments`, `end-udp-sockets`, on by
/// default): then it is `--flag=false`. A list is the flag's
/// comma-separated list. Each value is checked here, the error naming the
/// file's field (`flags.cluster-cidr`). Flags given on the command line
/// (`extra`) override the file's.
pub(crate) fn config_args(
    path: &str,
    doc: &serde_json::Value,
    extra: &[String],
) -> Result<Vec<String>, String> {
    let map = doc
        .as_object()
        .ok_or_else(|| format!("{path}: expected a mapping"))?;
    let word = |key: &str| {
        let value = map
            .get(key)
            .and_then(|v| v.as_str())
            .ok_or_else(|| format!("{path}: `{key}` is missing"))?;
        expand_env(value).map_err(|e| format!("{path}: {key}: {e}"))
    };
    let given = given_flags(extra);
    // Each value is checked here, so that an error names the file's field
    // (`flags.cluster-cidr`) and comes before anything is bound.
    let flags = |out: &mut Vec<String>,
                 at: &str,
                 entries: &mut dyn Iterator<Item = (&String, &serde_json::Value)>|
     -> Result<(), String> {
        for (key, value) in entries {
            if given.contains(key.as_str()) {
                continue; // the command line's wins
            }
            let field = format!("{path}: {at}{key}");
            let text = match value {
                serde_json::Value::Bool(true) => {
                    out.push(format!("--{key}"));
                    continue;
                }
                // A boolean flag that takes a value may be on by default:
                // false must be said.
                serde_json::Value::Bool(false)
                    if crate::kube_proxy::clap_flag(key) == Some(true) =>
                {
                    out.push(format!("--{key}=false"));
                    continue;
                }
                serde_json::Value::Bool(false) | serde_json::Value::Null => continue,
                serde_json::Value::String(s) => {
                    expand_env(s).map_err(|e| format!("{field}: {e}"))?
                }
                // A list is the flag's comma-separated list.
                serde_json::Value::Array(items) => {
                    let mut parts = Vec::new();
                    for (i, item) in items.iter().enumerate() {
                        let part = match item {
                            serde_json::Value::String(s) => {
                                expand_env(s).map_err(|e| format!("{field}[{i}]: {e}"))?
                            }
                            serde_json::Value::Number(n) => n.to_string(),
                            other => {
                                return Err(format!("{field}[{i}]: {other} is not a value"));
                            }
                        };
                        if let Err(e) = check_value(key, &part) {
                            return Err(format!("{field}[{i}]: {e}"));
                        }
                        parts.push(part);
                    }
                    parts.join(",")
                }
                serde_json::Value::Object(_) => {
                    return Err(format!("{field}: a mapping is not a flag's value"));
                }
                other => other.to_string(),
            };
            check_value(key, &text).map_err(|e| format!("{field}: {e}"))?;
            out.push(format!("--{key}={text}"));
        }
        Ok(())
    };
    let source = word("source")?;
    let sink = word("sink")?;
    let mut argv = vec!["kpng".to_owned(), source.clone()];
    let mut source_flags = map
        .iter()
        .filter(|(k, _)| !["source", "sink", "flags"].contains(&k.as_str()));
    flags(&mut argv, "", &mut source_flags)?;
    let (extra_source, extra_sink) = split_extra(&source, &sink, extra);
    argv.extend(extra_source);
    argv.push(sink);
    if let Some(sink_flags) = map.get("flags").and_then(|v| v.as_object()) {
        flags(&mut argv, "flags.", &mut sink_flags.iter())?;
    }
    argv.extend(extra_sink);
    Ok(argv)
}

/// Checks a value of kpng's flag `name` as the command line does (CIDR
/// lists, bind addresses, durations); other flags are left to clap.
fn check_value(name: &str, value: &str) -> Result<(), String> {
    use crate::args;
    match name {
        "cluster-cidr" | "service-cidr" => args::cidr_list(value).map(drop),
        "nodeport-addresses" => args::nodeport_addresses(value).map(drop),
        "healthz-bind-address" => args::healthz_address(value).map(drop),
        "metrics-bind-address" => args::metrics_address(value).map(drop),
        "mass-delete-max-share" => args::share(value).map(drop),
        "min-sync-period"
        | "mass-delete-confirm-after"
        | "healthz-timeout"
        | "conntrack-tcp-timeout-established"
        | "conntrack-tcp-timeout-close-wait"
        | "conntrack-udp-timeout"
        | "conntrack-udp-timeout-stream" => args::parse_duration(value).map(drop),
        _ => Ok(()),
    }
}

/// The name of a long flag (`--name` or `--name=value`); `None` for
/// anything else.
pub(crate) fn flag_name(arg: &str) -> Option<&str> {
    let long = arg.strip_prefix("--")?;
    Some(long.split_once('=').map_or(long, |(name, _)| name))
}

/// The names of the flags given on the command line: they override a
/// config file's.
pub(crate) fn given_flags(extra: &[String]) -> std::collections::BTreeSet<&str> {
    extra.iter().filter_map(|a| flag_name(a)).collect()
}

/// Splits command-line flags into the source's and the rest (the sink's,
/// and any clap will refuse), by the source command's own flags; a flag's
/// value, when given apart (`--node a`), goes with it.
pub(crate) fn split_extra(
    source: &str,
    sink: &str,
    extra: &[String],
) -> (Vec<String>, Vec<String>) {
    use clap::CommandFactory as _;
    let cli = Cli::command();
    let source_cmd = cli.find_subcommand(source);
    let sink_cmd = source_cmd.and_then(|c| c.find_subcommand(sink));
    let takes_value = |cmd: Option<&clap::Command>, name: &str| {
        cmd.and_then(|c| c.get_arguments().find(|a| a.get_long() == Some(name)))
            .map(|a| a.get_action().takes_values())
    };
    let (mut to_source, mut to_sink) = (Vec::new(), Vec::new());
    let mut args = extra.iter();
    while let Some(arg) = args.next() {
        let Some(name) = flag_name(arg) else {
            to_sink.push(arg.clone());
            continue;
        };
        let (target, takes) = match (takes_value(source_cmd, name), takes_value(sink_cmd, name)) {
            (Some(takes), None) => (&mut to_source, takes),
            (_, Some(takes)) => (&mut to_sink, takes),
            (None, None) => (&mut to_sink, false),
        };
        target.push(arg.clone());
        if takes && !arg.contains('=') {
            target.extend(args.next().cloned());
        }
    }
    (to_source, to_sink)
}

/// Replaces each `${NAME}` in `text` by the environment variable's value.
///
/// # Errors
/// The first variable that is not set, by name.
pub(crate) fn expand_env(text: &str) -> Result<String, String> {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(start) = rest.find("${") {
        out.push_str(&rest[..start]);
        match rest[start + 2..].find('}') {
            Some(end) => {
                let name = &rest[start + 2..start + 2 + end];
                let value = std::env::var(name).map_err(|_| format!("${{{name}}} is not set"))?;
                out.push_str(&value);
                rest = &rest[start + 3 + end..];
            }
            None => {
                out.push_str(&rest[start..]);
                rest = "";
            }
        }
    }
    out.push_str(rest);
    Ok(out)
}

#[cfg(test)]
mod tests {
    /// A `false` flag that is on by default is said (it was left out, so
    /// `localhost-nodeports: false` or `nft-comments: false` stayed on);
    /// a switch (`masquerade-all`) false is left out, as before.
    #[test]
    fn false_is_said_for_flags_on_by_default() {
        let doc: serde_json::Value = serde_saphyr::from_str(
            "source: kube\nsink: to-ebpf\nflags: {localhost-nodeports: false, end-udp-sockets: false, masquerade-all: false, counters: true}\n",
        )
        .expect("yaml");
        // (The file's flags in name order.)
        let argv = super::config_args("kpng.yaml", &doc, &[]).expect("args");
        assert_eq!(
            argv,
            [
                "kpng",
                "kube",
                "to-ebpf",
                "--counters",
                "--end-udp-sockets=false",
                "--localhost-nodeports=false",
            ]
        );
    }
}
