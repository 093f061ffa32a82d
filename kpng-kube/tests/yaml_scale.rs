//! kubectl's YAML at cluster sizes: a `List` and many documents over
//! serde-saphyr's default budget (250,000 nodes, 1,024 documents) load as
//! the same cluster in JSON does; errors name the document and the line
//! and column of the whole file; alias bombs are still refused.

mod support;

use std::time::{Duration, Instant};

use kpng_kube::{Error, Ingest, IngestConfig};
use kpng_store::Store;
use support::kubectl::Cluster;

fn ingest() -> Ingest {
    Ingest::new(Store::new(), IngestConfig::default())
}

/// Loads `text` and returns what the store holds.
fn load(name: &str, text: &str) -> Vec<String> {
    let mut ingest = ingest();
    ingest
        .load_str(name, text)
        .unwrap_or_else(|e| panic!("{name} loads: {e}"));
    ingest
        .reader()
        .snapshot()
        .iter()
        .map(|(k, v)| format!("{k:?} {v:?}"))
        .collect()
}

fn manifest_error(text: &str) -> String {
    let mut ingest = ingest();
    match ingest.load_str("big.yaml", text) {
        Err(e @ Error::Manifest { .. }) => {
            assert_eq!(ingest.reader().snapshot().revision(), 0, "nothing applied");
            e.to_string()
        }
        other => panic!("expected a manifest error, got {other:?}"),
    }
}

/// What loading `text` skipped, each named with its place: the rest is
/// applied.
fn skipped(text: &str) -> Vec<String> {
    let config = kpng_kube::translate::TranslateConfig::default();
    let (_, skipped) = kpng_kube::file::parse_reporting("big.yaml", text, &config).expect("read");
    skipped.iter().map(ToString::to_string).collect()
}

/// The 1-based line of the first occurrence of `needle` in `text`.
fn line_of(text: &str, needle: &str) -> usize {
    let at = text.find(needle).expect("needle in text");
    text[..at].matches('\n').count() + 1
}

#[test]
fn a_kubectl_yaml_list_over_the_default_budget_loads_as_its_json_does() {
    let cluster = Cluster::new(3_000, 10);
    let yaml = cluster.yaml_list();
    // Well over serde-saphyr's default of 250,000 nodes a stream.
    assert!(yaml.len() > 10_000_000, "{} bytes", yaml.len());
    let from_yaml = load("cluster.yaml", &yaml);
    let from_json = load("cluster.json", &cluster.json_list());
    assert!(
        from_json.len() > 3_000,
        "services and endpoints: {}",
        from_json.len()
    );
    assert_eq!(from_yaml.len(), from_json.len());
    assert!(
        from_yaml == from_json,
        "the same cluster from YAML and JSON"
    );
}

#[test]
fn two_thousand_documents_load_as_one_list_does() {
    // 950 Services, 950 slices, 100 Nodes: 2,000 documents.
    let cluster = Cluster::new(950, 10);
    let docs = cluster.yaml_documents();
    assert_eq!(docs.matches("\n---\n").count() + 1, 2_000);
    assert_eq!(
        load("docs.yaml", &docs),
        load("list.yaml", &cluster.yaml_list())
    );
}

#[test]
fn a_syntax_error_names_its_document_and_the_files_line_and_column() {
    let cluster = Cluster::new(950, 10);
    let docs = cluster.yaml_documents();
    // Break the slice of svc-700 (document 950 + 700): a key with a
    // second `: ` on its line.
    let needle = "  generateName: svc-700-\n";
    let line = line_of(&docs, needle);
    let broken = docs.replacen(needle, "  generateName: svc-700-: x\n", 1);
    let msg = manifest_error(&broken);
    let start = line_of(
        &broken,
        "addressType: IPv4\napiVersion: discovery.k8s.io/v1\nendpoints:\n- addresses:\n  - 10.128.27.89",
    );
    assert!(
        msg.starts_with(&format!(
            "big.yaml: document 1650 (line {start}): invalid YAML: "
        )),
        "{msg}"
    );
    assert!(
        msg.contains(&format!("at line {line}, column 25")),
        "line {line} of the file: {msg}"
    );
    assert_eq!(msg.lines().count(), 1, "one line: {msg}");
}

#[test]
fn a_bad_list_item_names_its_index_and_line() {
    let cluster = Cluster::new(1_200, 10);
    let yaml = cluster.yaml_list();
    let needle = "    name: svc-1100\n";
    let broken = yaml.replacen(
        "  spec:\n    clusterIP: 10.96.4.86\n    clusterIPs:\n    - 10.96.4.86\n",
        "  spec:\n    clusterIP: 10.96.4.300\n    clusterIPs:\n    - 10.96.4.300\n",
        1,
    );
    assert_ne!(broken, yaml);
    // The item starts at its `- apiVersion: v1` line, before its name.
    let name_line = line_of(&broken, needle);
    let item_line = broken[..broken.find(needle).expect("svc-1100")]
        .rfind("\n- apiVersion: v1\n")
        .map(|at| broken[..at].matches('\n').count() + 2)
        .expect("item start");
    assert!(item_line < name_line);
    let skipped = skipped(&broken);
    assert_eq!(skipped.len(), 1, "{skipped:?}");
    let msg = &skipped[0];
    assert!(
        msg.starts_with(&format!(
            "document 0 (List item 1100, line {item_line}): Service team-0/svc-1100: "
        )),
        "{msg}"
    );
    assert!(msg.contains("10.96.4.300"), "{msg}");
}

#[test]
fn a_bad_object_in_a_document_names_the_document_and_its_line() {
    let text = "# a comment\n---\n---\napiVersion: v1\nkind: Node\nmetadata: {name: node-9}\n---\n\nkind: Service\nmetadata: {namespace: a, name: b}\nspec: {clusterIP: 10.96.0.1, ports: [{port: 99999}]}\n";
    assert_eq!(
        skipped(text),
        [
            "document 2 (line 9): Service a/b: spec.ports[0].port: Invalid value: 99999: must be between 1 and 65535, inclusive"
        ]
    );
}

#[test]
fn a_document_that_is_no_object_says_so() {
    for (text, line) in [
        ("kind: ConfigMap\n---\njust text\n", 3),
        ("---\n- a\n- b\n", 2),
    ] {
        let msg = manifest_error(text);
        let document = if line == 3 { 1 } else { 0 };
        assert_eq!(
            msg,
            format!("big.yaml: document {document} (line {line}): not an object")
        );
    }
}

/// `levels` of anchors, each a sequence of ten aliases of the one before.
fn laughs(levels: usize) -> String {
    let mut out =
        String::from("kind: Laughs\na0: &a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol, lol]\n");
    for l in 1..levels {
        let p = l - 1;
        out.push_str(&format!(
            "a{l}: &a{l} [*a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}]\n"
        ));
    }
    out
}

#[test]
fn an_alias_bomb_is_refused_quickly_with_the_limit_named() {
    let started = Instant::now();
    // A billion laughs: 10^9 scalars from 600 bytes.
    let msg = manifest_error(&laughs(9));
    assert!(
        msg.starts_with("big.yaml: document 0 (line 1): invalid YAML: "),
        "{msg}"
    );
    assert!(msg.contains("a limit against YAML bombs"), "{msg}");
    assert!(started.elapsed() < Duration::from_secs(10));

    // A bomb inside a big file is refused just the same: the allowance
    // grows with the file's bytes, not with what aliases expand to.
    let cluster = Cluster::new(300, 10);
    let big = format!("{}---\n{}", cluster.yaml_documents(), laughs(9));
    let msg = manifest_error(&big);
    assert!(msg.contains("a limit against YAML bombs"), "{msg}");
}

#[test]
fn the_allowance_is_shared_by_the_files_documents() {
    // Ten documents, each replaying about 111,000 scalars from aliases: each
    // alone is within serde-saphyr's limits (250,000 nodes, 1,000,000
    // replayed events), but together they are far over one node per byte
    // of the file (at least 250,000).
    let one = laughs(5);
    let text: String = (0..10).map(|_| format!("---\n{one}")).collect();
    assert!(text.len() < 10_000);
    let msg = manifest_error(&text);
    assert!(
        msg.starts_with("big.yaml: document 2 (line "),
        "the third document exhausts it: {msg}"
    );
    assert!(msg.contains("a limit against YAML bombs"), "{msg}");
    // One such document alone is over no limit: it parses, and is refused
    // only as a manifest with nothing kpng reads (the guard's rule).
    let mut ingest = ingest();
    match ingest.load_str("one.yaml", &one) {
        Err(kpng_kube::Error::Empty { path }) => assert_eq!(path, "one.yaml"),
        other => panic!("one document of aliases: {other:?}"),
    }
}
