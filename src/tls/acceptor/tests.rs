use std::path::{Path, PathBuf};

use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair};

use super::*;

/// A fresh directory under the system's temp dir, removed when dropped.
struct Dir(PathBuf);

impl Dir {
    fn new(name: &str) -> Self {
        let path =
            std::env::temp_dir().join(format!("tokenmeter-acceptor-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path).expect("create the temp dir");
        Self(path)
    }

    fn write(&self, name: &str, text: &str) -> PathBuf {
        let path = self.0.join(name);
        std::fs::write(&path, text).expect("write a PEM file");
        path
    }

    /// Writes `tls.crt` and `tls.key`; the table that names them.
    fn cert_and_key(&self, cert_pem: &str, key_pem: &str) -> ServerTlsConfig {
        config(
            &self.write("tls.crt", cert_pem),
            &self.write("tls.key", key_pem),
        )
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A CA, and a `localhost` certificate it signed (chain PEM, key PEM).
fn issue(ca_name: &str) -> (String, String, String) {
    let ca_key = KeyPair::generate().expect("CA key");
    let mut ca = CertificateParams::new(Vec::<String>::new()).expect("CA params");
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.distinguished_name
        .push(rcgen::DnType::CommonName, ca_name);
    let ca_cert = ca.self_signed(&ca_key).expect("CA certificate");
    let issuer = Issuer::new(ca, ca_key);
    let key = KeyPair::generate().expect("leaf key");
    let leaf = CertificateParams::new(vec!["localhost".to_owned()])
        .expect("leaf params")
        .signed_by(&key, &issuer)
        .expect("leaf certificate");
    (ca_cert.pem(), leaf.pem(), key.serialize_pem())
}

fn config(cert: &Path, key: &Path) -> ServerTlsConfig {
    ServerTlsConfig {
        cert: cert.to_owned(),
        key: key.to_owned(),
        client_ca: None,
        reload_interval: Duration::from_secs(10),
    }
}

#[test]
fn a_missing_file_names_its_key() {
    let dir = Dir::new("missing");
    let key = dir.write("tls.key", &issue("ca").2);
    let err = ServerTls::load(
        "server.tls",
        &config(&dir.0.join("nope.crt"), &key),
        ALPN_TRAFFIC,
    )
    .expect_err("no certificate file");
    let text = err.to_string();
    assert!(
        text.starts_with("config: server.tls.cert: cannot read "),
        "the error names the key: {text}"
    );
}

/// Why `table` does not load from a fresh directory `name` holding `cert_pem` and `key_pem`.
fn refusal(name: &str, table: &str, alpn: &[&[u8]], cert_pem: &str, key_pem: &str) -> String {
    let dir = Dir::new(name);
    let files = dir.cert_and_key(cert_pem, key_pem);
    let err = ServerTls::load(table, &files, alpn).expect_err("refused");
    err.to_string()
}

#[test]
fn a_key_of_another_certificate_is_refused_naming_the_key() {
    let (_, cert, _) = issue("ca");
    let (_, _, other_key) = issue("ca");
    let err = refusal(
        "mismatch",
        "server.admin_tls",
        ALPN_ADMIN,
        &cert,
        &other_key,
    );
    assert!(
        err.starts_with("config: server.admin_tls.key: does not fit the certificate"),
        "the error names the key: {err}"
    );
}

#[test]
fn a_certificate_file_without_a_certificate_is_refused() {
    let (_, _, key_pem) = issue("ca");
    assert_eq!(
        refusal("nocert", "server.tls", ALPN_TRAFFIC, &key_pem, &key_pem),
        "config: server.tls.cert: holds no PEM CERTIFICATE block",
        "a key is not a certificate"
    );
}

#[test]
fn reload_swaps_changed_files_and_keeps_the_running_ones_when_the_change_is_broken() {
    let dir = Dir::new("reload");
    let (_, cert_a, key_a) = issue("ca");
    let tls_config = dir.cert_and_key(&cert_a, &key_a);
    let tls = ServerTls::load("server.tls", &tls_config, ALPN_TRAFFIC).expect("loads");
    let first = tls.acceptor();
    assert!(
        matches!(tls.reload(), Reload::Unchanged),
        "same files: nothing to do"
    );
    assert!(
        Arc::ptr_eq(first.config(), tls.acceptor().config()),
        "an unchanged reload keeps the acceptor"
    );

    // Half a rotation: the new certificate is written, its key not yet.
    let (_, cert_b, key_b) = issue("ca");
    dir.write("tls.crt", &cert_b);
    match tls.reload() {
        Reload::Failed(err) => assert!(
            err.to_string().starts_with("config: server.tls.key:"),
            "the failure names the key: {err}"
        ),
        other => panic!("a certificate without its key must not load: {other:?}"),
    }
    assert!(
        Arc::ptr_eq(first.config(), tls.acceptor().config()),
        "a failed reload keeps the running certificate"
    );
    assert!(
        matches!(tls.reload(), Reload::Unchanged),
        "the same failure is reported once"
    );

    dir.write("tls.key", &key_b);
    assert!(
        matches!(tls.reload(), Reload::Reloaded),
        "the finished rotation loads"
    );
    assert!(
        !Arc::ptr_eq(first.config(), tls.acceptor().config()),
        "new connections get the new certificate"
    );
    assert_eq!(
        tls.acceptor().config().alpn_protocols,
        vec![b"h2".to_vec(), b"http/1.1".to_vec()],
        "ALPN survives a reload"
    );
}

#[test]
fn a_client_ca_file_must_hold_a_certificate() {
    let dir = Dir::new("mtls");
    let (ca, cert, key) = issue("clients");
    let mut tls_config = dir.cert_and_key(&cert, &key);
    tls_config.client_ca = Some(dir.write("ca.crt", &ca));
    // Whether a client without a certificate is refused is shown end to end (tests/e2e/tls_server.rs).
    ServerTls::load("server.tls", &tls_config, ALPN_TRAFFIC).expect("loads with a client CA");
    tls_config.client_ca = Some(dir.write("empty.crt", ""));
    let err = ServerTls::load("server.tls", &tls_config, ALPN_TRAFFIC).expect_err("empty CA");
    assert_eq!(
        err.to_string(),
        "config: server.tls.client_ca: holds no PEM CERTIFICATE block"
    );
}
