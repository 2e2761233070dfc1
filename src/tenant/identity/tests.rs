use http::HeaderValue;

use super::*;

const TEST_DIGEST: &str = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08";

fn identity(sources: &[TenantSource], anonymous: Anonymous) -> Identity {
    Identity {
        sources: sources.to_vec(),
        header: HeaderName::from_static("x-tenant-id"),
        keys: KeyTable::parse(&format!("sha256:{TEST_DIGEST} team-a")).unwrap(),
        cert_field: CertField::SubjectCn,
        anonymous,
        upstream_authorization: None,
    }
}

fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
    let mut map = HeaderMap::new();
    for (name, value) in pairs {
        map.insert(*name, HeaderValue::from_str(value).unwrap());
    }
    map
}

#[test]
fn sources_are_tried_in_order() {
    let both = identity(
        &[TenantSource::Header, TenantSource::ApiKey],
        Anonymous::Allow,
    );
    let request = headers(&[("x-tenant-id", "gw-b"), ("authorization", "Bearer test")]);
    assert_eq!(
        both.resolve(&request, None),
        Ok(Some("gw-b")),
        "the header first"
    );
    let keys_first = identity(
        &[TenantSource::ApiKey, TenantSource::Header],
        Anonymous::Allow,
    );
    assert_eq!(
        keys_first.resolve(&request, None),
        Ok(Some("team-a")),
        "the key first"
    );
    let no_key = headers(&[("x-tenant-id", "gw-b")]);
    assert_eq!(
        keys_first.resolve(&no_key, None),
        Ok(Some("gw-b")),
        "then the header"
    );
}

#[test]
fn bearer_keys_are_read_strictly() {
    let keys = identity(&[TenantSource::ApiKey], Anonymous::Refuse);
    for (value, expected) in [
        ("Bearer test", Ok(Some("team-a"))),
        ("bearer   test ", Ok(Some("team-a"))),
        ("Bearer other", Err(Unnamed::UnknownKey)),
        ("Basic dGVzdA==", Err(Unnamed::MalformedAuthorization)),
        ("Bearer", Err(Unnamed::MalformedAuthorization)),
        ("Bearer a b", Err(Unnamed::MalformedAuthorization)),
        ("test", Err(Unnamed::MalformedAuthorization)),
    ] {
        assert_eq!(
            keys.resolve(&headers(&[("authorization", value)]), None),
            expected,
            "{value}"
        );
    }
    assert_eq!(keys.resolve(&HeaderMap::new(), None), Err(Unnamed::Nobody));
    let allow = identity(&[TenantSource::ApiKey], Anonymous::Allow);
    assert_eq!(
        allow.resolve(&headers(&[("authorization", "Bearer other")]), None),
        Ok(None),
        "anonymous when allowed"
    );
}

#[test]
fn refusals_never_repeat_the_key() {
    for unnamed in [
        Unnamed::Nobody,
        Unnamed::UnknownKey,
        Unnamed::MalformedAuthorization,
        Unnamed::NoCertificate,
        Unnamed::CertificateUnnamed(CertField::SubjectCn),
    ] {
        assert!(!unnamed.message().contains("test"));
    }
}

/// Certificate names as the handshake would have read them: a self-signed certificate with the
/// common name `cn` and the DNS name `dns`.
fn certificate(cn: &str, dns: &str) -> CertificateNames {
    let key = rcgen::KeyPair::generate().unwrap();
    let mut params = rcgen::CertificateParams::new(vec![dns.to_owned()]).unwrap();
    params.distinguished_name = rcgen::DistinguishedName::new();
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, cn);
    CertificateNames::from_der(params.self_signed(&key).unwrap().der())
}

#[test]
fn the_client_certificate_names_by_the_configured_field_in_source_order() {
    let cert = certificate("team-cn", "team-dns.example");
    let mut only_cert = identity(&[TenantSource::ClientCert], Anonymous::Refuse);
    assert_eq!(
        only_cert.resolve(&HeaderMap::new(), Some(&cert)),
        Ok(Some("team-cn")),
        "the subject CN by default"
    );
    only_cert.cert_field = CertField::SanDns;
    assert_eq!(
        only_cert.resolve(&HeaderMap::new(), Some(&cert)),
        Ok(Some("team-dns.example")),
        "the DNS name when asked"
    );
    only_cert.cert_field = CertField::SanEmail;
    assert_eq!(
        only_cert.resolve(&HeaderMap::new(), Some(&cert)),
        Err(Unnamed::CertificateUnnamed(CertField::SanEmail)),
        "a certificate without the field names nobody"
    );
    assert_eq!(
        only_cert.resolve(&HeaderMap::new(), None),
        Err(Unnamed::NoCertificate),
        "no certificate"
    );

    let request = headers(&[("x-tenant-id", "gw-b")]);
    let header_first = identity(
        &[TenantSource::Header, TenantSource::ClientCert],
        Anonymous::Refuse,
    );
    assert_eq!(
        header_first.resolve(&request, Some(&cert)),
        Ok(Some("gw-b")),
        "the header first"
    );
    assert_eq!(
        header_first.resolve(&HeaderMap::new(), Some(&cert)),
        Ok(Some("team-cn")),
        "then the certificate"
    );
    let cert_first = identity(
        &[TenantSource::ClientCert, TenantSource::Header],
        Anonymous::Refuse,
    );
    assert_eq!(
        cert_first.resolve(&request, Some(&cert)),
        Ok(Some("team-cn")),
        "the certificate first"
    );
    assert_eq!(
        cert_first.resolve(&request, None),
        Ok(Some("gw-b")),
        "then the header"
    );
    let key_then_cert = identity(
        &[TenantSource::ApiKey, TenantSource::ClientCert],
        Anonymous::Refuse,
    );
    assert_eq!(
        key_then_cert.resolve(&headers(&[("authorization", "Bearer other")]), None),
        Err(Unnamed::UnknownKey),
        "an unknown key says more than a missing certificate"
    );
    let allow = identity(&[TenantSource::ClientCert], Anonymous::Allow);
    assert_eq!(
        allow.resolve(&HeaderMap::new(), None),
        Ok(None),
        "anonymous"
    );
}

/// A temp file holding `text`, removed at the end of the test.
struct TempFile(std::path::PathBuf);

impl TempFile {
    fn new(name: &str, text: &[u8]) -> Self {
        let path =
            std::env::temp_dir().join(format!("tokenmeter-identity-{name}-{}", std::process::id()));
        std::fs::write(&path, text).unwrap();
        Self(path)
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

fn with_upstream_key(path: &Path) -> TenantsConfig {
    TenantsConfig {
        sources: vec![TenantSource::Header],
        upstream_key_file: Some(path.to_owned()),
        ..TenantsConfig::default()
    }
}

#[test]
fn the_backend_key_is_read_into_a_sensitive_bearer_value() {
    let file = TempFile::new("upstream-key", b"  sk-backend-123\n");
    let identity = Identity::from_config(&with_upstream_key(&file.0))
        .unwrap()
        .unwrap();
    let value = identity.upstream_authorization().unwrap();
    assert_eq!(value, "Bearer sk-backend-123", "trimmed, as a bearer key");
    assert!(value.is_sensitive(), "marked sensitive");
    assert_eq!(
        format!("{identity:?}").matches("sk-backend").count(),
        0,
        "the identity's debug text never shows the key"
    );
    let without = Identity::from_config(&TenantsConfig {
        sources: vec![TenantSource::Header],
        ..TenantsConfig::default()
    })
    .unwrap()
    .unwrap();
    assert_eq!(without.upstream_authorization(), None, "unset: no swap");
}

#[test]
fn a_bad_backend_key_file_is_refused_naming_the_key_and_path_never_the_key() {
    let missing = std::env::temp_dir().join("tokenmeter-identity-no-such-key-file");
    let err = Identity::from_config(&with_upstream_key(&missing)).unwrap_err();
    let text = err.to_string();
    assert!(
        text.starts_with(&format!(
            "tenants.upstream_key_file {}: ",
            missing.display()
        )),
        "{text}"
    );
    for (name, content, message) in [
        ("empty", &b" \n"[..], "is empty"),
        (
            "two-words",
            b"sk-secret-1 sk-secret-2\n",
            "the key must be one word of printable ASCII",
        ),
        (
            "control",
            b"sk-secret-\x01",
            "the key must be one word of printable ASCII",
        ),
    ] {
        let file = TempFile::new(name, content);
        let text = Identity::from_config(&with_upstream_key(&file.0))
            .unwrap_err()
            .to_string();
        assert_eq!(
            text,
            format!("tenants.upstream_key_file {}: {message}", file.0.display()),
            "{name}"
        );
        assert!(!text.contains("sk-secret"), "never the key: {text}");
    }
    let off = TenantsConfig {
        upstream_key_file: Some(missing.clone()),
        ..TenantsConfig::default()
    };
    let text = Identity::from_config(&off).unwrap_err().to_string();
    assert!(
        text.contains("needs tenants.sources"),
        "a key file with tenants off (from the environment) is refused: {text}"
    );
}
