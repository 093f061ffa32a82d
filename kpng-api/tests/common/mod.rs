//! Helpers the API tests share (each test uses what it needs).
#![allow(dead_code)]

/// A store holding `cluster`, its Services and endpoints marked listed
/// (a server answers agents only then).
pub(crate) fn listed_store(cluster: &kpng_testkit::Cluster) -> kpng_store::Store {
    let mut store = kpng_store::Store::new();
    cluster.load_into(&mut store);
    store.mark_listed(kpng_model::Kind::Service);
    store.mark_listed(kpng_model::Kind::Endpoint);
    store
}

/// A unix socket path unique to this test process: `kpng-PREFIX-TEST-PID.sock`.
pub(crate) fn socket_path(prefix: &str, test: &str) -> std::path::PathBuf {
    std::env::temp_dir().join(format!("kpng-{prefix}-{test}-{}.sock", std::process::id()))
}

/// Certificates for a test: a CA, a server certificate for `localhost`, a
/// client certificate, and one from another CA.
pub(crate) struct Pki {
    pub(crate) ca: String,
    pub(crate) server: (String, String),
    pub(crate) client: (String, String),
    pub(crate) stranger: (String, String),
}

pub(crate) fn pki() -> Pki {
    use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, IsCa, KeyPair};
    let ca_params = |name: &str| {
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("params");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, name);
        params
    };
    let ca =
        CertifiedIssuer::self_signed(ca_params("kpng test CA"), KeyPair::generate().expect("key"))
            .expect("ca");
    let other =
        CertifiedIssuer::self_signed(ca_params("another CA"), KeyPair::generate().expect("key"))
            .expect("ca");
    let leaf = |names: &[&str], issuer: &CertifiedIssuer<'_, KeyPair>| {
        let key = KeyPair::generate().expect("key");
        let params =
            CertificateParams::new(names.iter().map(|n| n.to_string()).collect::<Vec<_>>())
                .expect("params");
        let cert = params.signed_by(&key, issuer).expect("sign");
        (cert.pem(), key.serialize_pem())
    };
    Pki {
        ca: ca.pem(),
        server: leaf(&["localhost"], &ca),
        client: leaf(&["node-1"], &ca),
        stranger: leaf(&["node-1"], &other),
    }
}
