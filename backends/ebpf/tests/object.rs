//! The checked-in BPF object is what its C source builds to.
//!
//! clang (Debian's clang 14, with `libbpf-dev`) rebuilds `bpf/kpng_sock.c`
//! (with the parts it includes) with the crate's own arguments ([`CLANG_ARGS`]) and the result must
//! equal `bpf/kpng_sock.o` byte for byte. CI installs clang, so there a
//! missing clang fails the test; elsewhere it prints SKIPPED.
//! `KPNG_BLESS=1 cargo test -p kpng-backend-ebpf --test object` writes
//! the new object after a change of the source.

use std::path::Path;
use std::process::Command;

use kpng_backend_ebpf::object::{
    CLANG_ARGS, END_CLANG_ARGS, END_OBJECT, END_OBJECT_FILE, END_SOURCE, END_SOURCE_FILE, OBJECT,
    OBJECT_FILE, SOURCE, SOURCE_FILE, SOURCE_PARTS,
};

#[test]
fn the_checked_in_object_is_what_the_source_builds_to() {
    // One compilation unit: the parts are included, and are there.
    let bpf = Path::new(env!("CARGO_MANIFEST_DIR")).join("bpf");
    for part in SOURCE_PARTS {
        assert!(SOURCE.contains(&format!("#include \"{part}\"")), "{part}");
        assert!(bpf.join(part).is_file(), "bpf/{part}");
    }
    check(SOURCE_FILE, SOURCE, CLANG_ARGS, OBJECT_FILE, OBJECT);
}

#[test]
fn the_checked_in_ending_object_is_what_its_source_builds_to() {
    check(
        END_SOURCE_FILE,
        END_SOURCE,
        END_CLANG_ARGS,
        END_OBJECT_FILE,
        END_OBJECT,
    );
}

fn check(
    source_file: &str,
    source_text: &str,
    clang_args: &[&str],
    object_file: &str,
    object: &[u8],
) {
    let bpf = Path::new(env!("CARGO_MANIFEST_DIR")).join("bpf");
    let source = std::fs::read_to_string(bpf.join(source_file)).expect("source");
    assert_eq!(source, source_text);
    let out = std::env::temp_dir().join(format!("kpng-{}-{}.o", source_file, std::process::id()));
    let built = Command::new("clang")
        .current_dir(&bpf)
        .args(clang_args)
        .arg(&out)
        .output();
    let built = match built {
        Ok(built) => built,
        Err(e) if std::env::var_os("CI").is_none() => {
            eprintln!("SKIPPED: clang: {e} (apt-get install clang libbpf-dev)");
            return;
        }
        Err(e) => panic!("clang: {e}; CI must install clang and libbpf-dev"),
    };
    assert!(
        built.status.success(),
        "clang failed: {}",
        String::from_utf8_lossy(&built.stderr)
    );
    let fresh = std::fs::read(&out).expect("built object");
    let _ = std::fs::remove_file(&out);
    if std::env::var_os("KPNG_BLESS").is_some() {
        std::fs::write(bpf.join(object_file), &fresh).expect("write the object");
        return;
    }
    assert!(
        fresh == object,
        "bpf/{object_file} is not what bpf/{source_file} builds to ({} bytes built, {} checked in): \
         run `KPNG_BLESS=1 cargo test -p kpng-backend-ebpf --test object` and commit the object",
        fresh.len(),
        object.len()
    );
}
