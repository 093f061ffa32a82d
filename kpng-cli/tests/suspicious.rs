//! Objects the API server refuses, in a file: each is skipped with a
//! warning naming it, the field and the value, never silently changed;
//! of two Services of one name, the first is kept.

use std::process::Command;

const MANIFEST: &str = "\
kind: Node
metadata: {name: node-a}
status: {addresses: [{type: InternalIP, address: 192.168.5.1}]}
---
kind: Service
metadata: {namespace: a, name: web}
spec: {clusterIP: 10.96.0.1, ports: [{name: http, port: 80}]}
---
kind: Service
metadata: {namespace: a, name: zero}
spec: {clusterIP: 10.96.0.2, ports: [{name: http, port: 80}, {name: none, port: 0}]}
---
kind: Service
metadata: {namespace: a, name: minus}
spec: {clusterIP: 10.96.0.3, ports: [{port: 80}], sessionAffinity: ClientIP, sessionAffinityConfig: {clientIP: {timeoutSeconds: -1}}}
---
kind: Service
metadata: {namespace: a, name: nought}
spec: {clusterIP: 10.96.0.4, ports: [{port: 80}], sessionAffinity: ClientIP, sessionAffinityConfig: {clientIP: {timeoutSeconds: 0}}}
---
kind: Service
metadata: {namespace: a, name: long}
spec: {clusterIP: 10.96.0.5, ports: [{port: 80}], sessionAffinity: ClientIP, sessionAffinityConfig: {clientIP: {timeoutSeconds: 86401}}}
---
kind: Service
metadata: {namespace: a, name: day}
spec: {clusterIP: 10.96.0.6, ports: [{port: 80}], sessionAffinity: ClientIP, sessionAffinityConfig: {clientIP: {timeoutSeconds: 86400}}}
---
kind: Service
metadata: {namespace: a, name: web}
spec: {clusterIP: 10.96.0.9, ports: [{name: http, port: 80}]}
";

#[test]
fn refused_and_duplicate_services_are_warned_of_and_not_programmed() {
    let path = std::env::temp_dir().join(format!("kpng-suspicious-{}.yaml", std::process::id()));
    std::fs::write(&path, MANIFEST).expect("write");
    let out = Command::new(env!("CARGO_BIN_EXE_kpng"))
        .args(["file", "--input"])
        .arg(&path)
        .args([
            "--node",
            "node-a",
            "to-nft",
            "--dry-run",
            "--once",
            "--metrics-bind-address",
            "",
        ])
        .env_remove("RUST_LOG")
        .output()
        .expect("run kpng");
    let _ = std::fs::remove_file(&path);
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(out.status.success(), "{stderr}");
    let file = path.display();
    let warnings: Vec<&str> = stderr.lines().filter(|l| l.contains(" WARN ")).collect();
    let expected = [
        "document 2: Service a/zero: spec.ports[1].port: port 0: the API server refuses it (must be 1-65535); the object is skipped".to_owned(),
        "document 3: Service a/minus: spec.sessionAffinityConfig.clientIP.timeoutSeconds: -1: the API server refuses it (must be 1-86400); the object is skipped".to_owned(),
        "document 4: Service a/nought: spec.sessionAffinityConfig.clientIP.timeoutSeconds: 0: the API server refuses it (must be 1-86400); the object is skipped".to_owned(),
        "document 5: Service a/long: spec.sessionAffinityConfig.clientIP.timeoutSeconds: 86401: the API server refuses it (must be 1-86400); the object is skipped".to_owned(),
        "document 7: Service a/web is also document 1: the first is kept, this one is skipped".to_owned(),
    ];
    assert_eq!(warnings.len(), expected.len(), "{stderr}");
    for (line, want) in warnings.iter().zip(&expected) {
        assert!(
            line.ends_with(&format!("{file}: {want}")),
            "{line}\nwanted: {want}"
        );
    }
    // Programmed: the first a/web and a/day (a day is allowed); nothing
    // of the refused ones nor of the second a/web.
    for kept in ["10.96.0.1 ", "10.96.0.6 "] {
        assert!(stdout.contains(kept), "{kept} missing:\n{stdout}");
    }
    for skipped in [
        "10.96.0.2",
        "10.96.0.3",
        "10.96.0.4",
        "10.96.0.5",
        "10.96.0.9",
    ] {
        assert!(!stdout.contains(skipped), "{skipped} programmed:\n{stdout}");
    }
}
