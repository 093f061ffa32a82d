//! kube-proxy's words: its command line (`kpng --config=FILE
//! --hostname-override=NODE`, or its flags alone, in any order) and its
//! configuration file, `KubeProxyConfiguration` (`kubeproxy.config.k8s.io`
//! `v1alpha1` and `v1alpha2`), turned into the kpng command line they
//! stand for. A kubeadm cluster's kube-proxy DaemonSet and ConfigMap run
//! kpng unchanged. What kpng does not do is a warning that names it; a
//! bad value is an error that names the file's field (or the flag), found
//! before anything is bound or started.
//!
//! kube-proxy 1.34–1.37 (`k8s.io/kube-proxy` v0.34–v0.37) publishes
//! `v1alpha1` only. `v1alpha2` is KEP-784's design, the shape of
//! kube-proxy's internal configuration since 1.31: `linux` (conntrack,
//! masqueradeAll, oomScoreAdj), top-level `syncPeriod` and
//! `minSyncPeriod`, `detectLocal.clusterCIDRs`, a `masqueradeBit` per mode.

mod command_line;
mod file;
pub(crate) mod flags;
mod settings;
#[cfg(test)]
mod tests;
mod version;

use self::flags::{Does, Flag};
use self::settings::Settings;

/// Whether a config file's document is a `KubeProxyConfiguration` (by
/// its `kind`).
pub(crate) fn is_kube_proxy_config(doc: &serde_json::Value) -> bool {
    doc.get("kind").and_then(serde_json::Value::as_str) == Some("KubeProxyConfiguration")
}

/// A command line read: the kpng command line it stands for, and the
/// warnings to log once the log is set up.
#[derive(Debug)]
pub(crate) struct Words {
    /// kpng's command line, for clap.
    pub(crate) argv: Vec<String>,
    /// One per setting kpng does not honour.
    pub(crate) warnings: Vec<String>,
}

/// Reads a command line in kpng's grammar (`kpng SOURCE … SINK …`, where
/// kube-proxy's flag names are taken too) or in kube-proxy's (flags only:
/// `--config`, `--hostname-override`, `--proxy-mode`, … in any order, with
/// kpng's own flags beside them).
///
/// # Errors
/// A flag kpng refuses, a file it cannot read, or a bad value, each named.
pub(crate) fn words(args: &[String]) -> Result<Words, String> {
    let mut warnings = Vec::new();
    let (verbosity, args) = take_verbosity(args)?;
    let program = args.first().cloned().unwrap_or_else(|| "kpng".to_owned());
    let rest = args.get(1..).unwrap_or_default();
    let kpng_grammar = rest.first().is_none_or(|first| {
        !first.starts_with('-') || ["-h", "--help", "-V", "--version"].contains(&first.as_str())
    });
    let (mut argv, file_verbosity) = if kpng_grammar {
        let mut argv = vec![program];
        argv.extend(kpng_flags(rest, &mut warnings)?);
        (argv, None)
    } else {
        kube_proxy_command_line(rest, &mut warnings)?
    };
    if let Some(v) = verbosity.or(file_verbosity) {
        argv.insert(1, format!("--v={v}"));
    }
    Ok(Words { argv, warnings })
}

/// Takes klog's `-v N`, `-v=N`, `--v N`, `--v=N` (and `-vN`) out of the
/// command line, wherever they are.
fn take_verbosity(args: &[String]) -> Result<(Option<u8>, Vec<String>), String> {
    let mut verbosity = None;
    let mut rest = Vec::new();
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        let value = match arg.as_str() {
            "-v" | "--v" => Some(it.next().cloned().ok_or("--v needs a level")?),
            other => other
                .strip_prefix("--v=")
                .or_else(|| other.strip_prefix("-v="))
                .or_else(|| {
                    other
                        .strip_prefix("-v")
                        .filter(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
                })
                .map(str::to_owned),
        };
        match value {
            Some(level) => {
                let n: u64 = level
                    .trim()
                    .parse()
                    .map_err(|_| format!("--v: {level:?} is not a level (0, 1, 2, …)"))?;
                verbosity = Some(u8::try_from(n).unwrap_or(u8::MAX));
            }
            None => rest.push(arg.clone()),
        }
    }
    Ok((verbosity, rest))
}

/// Whether clap knows `--name` anywhere in kpng's commands (by name or
/// alias), and whether it takes a value. The top-level kube-proxy words
/// (`--config`, `--hostname-override`, `--proxy-mode`) are read here, not
/// by clap, so they do not count.
pub(crate) fn clap_flag(name: &str) -> Option<bool> {
    use clap::CommandFactory as _;
    fn walk(cmd: &clap::Command, name: &str) -> Option<bool> {
        cmd.get_arguments()
            .find(|a| {
                a.get_long() == Some(name)
                    || a.get_all_aliases().is_some_and(|al| al.contains(&name))
            })
            .map(|a| a.get_action().takes_values())
            .or_else(|| cmd.get_subcommands().find_map(|c| walk(c, name)))
    }
    let cli = crate::args::Cli::command();
    cli.get_subcommands().find_map(|c| walk(c, name))
}

/// A flag's name and its value given inline (`--name=value`).
fn split_flag(arg: &str) -> Option<(&str, Option<&str>)> {
    let long = arg.strip_prefix("--")?;
    Some(match long.split_once('=') {
        Some((name, value)) => (name, Some(value)),
        None => (long, None),
    })
}

/// Whether a boolean flag's value is true (`--flag`, `--flag=true`).
fn truthy(value: &str) -> Result<bool, String> {
    match value {
        "true" | "1" | "t" | "T" | "TRUE" | "True" => Ok(true),
        "false" | "0" | "f" | "F" | "FALSE" | "False" => Ok(false),
        other => Err(format!("{other:?} is not true or false")),
    }
}

/// kpng's grammar, with kube-proxy's flags that kpng has no flag for
/// handled: ignored ones dropped with a warning, refused ones an error
/// that says why. kpng's own flags (and kube-proxy's that clap knows as
/// aliases) are left to clap.
fn kpng_flags(args: &[String], warnings: &mut Vec<String>) -> Result<Vec<String>, String> {
    let mut out = Vec::new();
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        let Some((name, inline)) = split_flag(arg) else {
            out.push(arg.clone());
            continue;
        };
        let Some(flag) = flags::find(name)
            .filter(|f| !["help", "version"].contains(&f.name) && clap_flag(name).is_none())
        else {
            out.push(arg.clone());
            continue;
        };
        let value = match (flag.value, inline) {
            (_, Some(v)) => v.to_owned(),
            (true, None) => it
                .next()
                .cloned()
                .ok_or_else(|| format!("--{name} needs a value"))?,
            (false, None) => "true".to_owned(),
        };
        match flag.does {
            Does::Ignored(why) => {
                let default = match name {
                    "detect-local-mode" => value == "ClusterCIDR",
                    _ => !flag.value && !truthy(&value).unwrap_or(true),
                };
                if !default {
                    warnings.push(format!("--{name} (kube-proxy's): {why}"));
                }
            }
            Does::Refused(why) => {
                return Err(format!("--{name} (kube-proxy's) is not supported: {why}"));
            }
            Does::Takes | Does::Alias(_) => {
                return Err(format!(
                    "--{name} is kube-proxy's command line (`kpng --config=FILE …` or kube-proxy's flags, with no SOURCE); after a SOURCE, the SINK word chooses the backend and kpng's flags follow it (kpng --help)"
                ));
            }
        }
    }
    Ok(out)
}

/// kube-proxy's command line: flags only, in any order. `--config` names
/// a `KubeProxyConfiguration` (or kpng's own YAML); kube-proxy's flags
/// set its fields (the command line wins over the file), and kpng's own
/// flags (`--dry-run`, `--once`, …) go to the kpng command line. Returns
/// that command line and the file's `logging.verbosity`.
fn kube_proxy_command_line(
    args: &[String],
    warnings: &mut Vec<String>,
) -> Result<(Vec<String>, Option<u8>), String> {
    let mut config_path = None;
    let mut given: Vec<(&'static Flag, String)> = Vec::new();
    let mut kpng = Vec::new();
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        if arg == "-h" {
            return Ok((vec!["kpng".to_owned(), "--help".to_owned()], None));
        }
        let Some((name, inline)) = split_flag(arg) else {
            return Err(format!(
                "{arg:?}: kube-proxy's command line takes flags only (kpng's starts with a SOURCE: file, kube or api)"
            ));
        };
        match flags::find(name) {
            Some(flag) => {
                let value = match (flag.value, inline) {
                    (_, Some(v)) => v.to_owned(),
                    (true, None) => it
                        .next()
                        .cloned()
                        .ok_or_else(|| format!("--{name} needs a value"))?,
                    (false, None) => "true".to_owned(),
                };
                match name {
                    "help" => return Ok((vec!["kpng".to_owned(), "--help".to_owned()], None)),
                    "version" => {
                        return Ok((vec!["kpng".to_owned(), "--version".to_owned()], None));
                    }
                    "config" => config_path = Some(value),
                    _ => given.push((flag, value)),
                }
            }
            None => {
                kpng.push(arg.clone());
                if inline.is_none() && clap_flag(name) == Some(true) {
                    kpng.extend(it.next().cloned());
                }
            }
        }
    }
    // The mode first: other flags depend on it, as in kube-proxy.
    given.sort_by_key(|(flag, _)| flag.name != "proxy-mode");
    let mut settings = match &config_path {
        Some(path) => {
            let text = std::fs::read_to_string(path).map_err(|e| format!("{path}: {e}"))?;
            let doc: serde_json::Value =
                serde_saphyr::from_str(&text).map_err(|e| format!("{path}: {e}"))?;
            if !is_kube_proxy_config(&doc) {
                let extra = kpng_words_beside_kpng_file(&given, kpng, warnings)?;
                return Ok((crate::config::config_args(path, &doc, &extra)?, None));
            }
            Settings::from_file(path, doc, warnings)?
        }
        None => Settings::default(),
    };
    for (flag, value) in &given {
        settings.set_flag(flag, value, warnings)?;
    }
    settings.validate()?;
    let verbosity = settings
        .verbosity
        .filter(|v| *v > 0)
        .map(|v| u8::try_from(v).unwrap_or(u8::MAX));
    Ok((settings.command_line(&kpng, warnings)?, verbosity))
}

/// kube-proxy's flags beside kpng's own YAML: taken by kpng's names
/// (`--hostname-override` is `--node`), ignored with a warning, or
/// refused. kpng's file names its sink, so `--proxy-mode` is refused.
fn kpng_words_beside_kpng_file(
    given: &[(&'static Flag, String)],
    mut kpng: Vec<String>,
    warnings: &mut Vec<String>,
) -> Result<Vec<String>, String> {
    let mut extra = Vec::new();
    for (flag, value) in given {
        let name = flag.name;
        match flag.does {
            Does::Alias(to) => extra.push(format!("--{to}={value}")),
            Does::Takes if name != "proxy-mode" && clap_flag(name).is_some() => {
                if !flag.value {
                    if truthy(value).map_err(|e| format!("--{name}: {e}"))? {
                        extra.push(format!("--{name}"));
                    }
                } else {
                    extra.push(format!("--{name}={value}"));
                }
            }
            Does::Ignored(why) => warnings.push(format!("--{name} (kube-proxy's): {why}")),
            Does::Refused(why) => {
                return Err(format!("--{name} (kube-proxy's) is not supported: {why}"));
            }
            Does::Takes => {
                return Err(format!(
                    "--{name} goes with a KubeProxyConfiguration or kube-proxy's flags; kpng's own file names its sink"
                ));
            }
        }
    }
    extra.append(&mut kpng);
    Ok(extra)
}
