use rcgen::{CertificateParams, DnType, KeyPair, SanType};

use super::*;

/// A self-signed certificate with the common name `cn` (none for `None`) and `sans`, as DER.
fn certificate(cn: Option<&str>, sans: Vec<SanType>) -> Vec<u8> {
    let key = KeyPair::generate().expect("a key");
    let mut params = CertificateParams::new(Vec::<String>::new()).expect("params");
    params.distinguished_name = rcgen::DistinguishedName::new();
    if let Some(cn) = cn {
        params.distinguished_name.push(DnType::CommonName, cn);
    }
    params.subject_alt_names = sans;
    params
        .self_signed(&key)
        .expect("certificate")
        .der()
        .to_vec()
}

fn ia5(text: &str) -> rcgen::string::Ia5String {
    text.try_into().expect("an IA5 string")
}

#[test]
fn every_field_is_read_and_the_first_of_each_kind_wins() {
    let der = certificate(
        Some("team-a"),
        vec![
            SanType::IpAddress([10, 0, 0, 1].into()),
            SanType::DnsName(ia5("team-a.clients.example")),
            SanType::DnsName(ia5("second.clients.example")),
            SanType::URI(ia5("spiffe://example.org/ns/search/sa/indexer")),
            SanType::Rfc822Name(ia5("ops@example.org")),
            SanType::Rfc822Name(ia5("second@example.org")),
        ],
    );
    let names = CertificateNames::from_der(&der);
    for (field, expected) in [
        (CertField::SubjectCn, "team-a"),
        (CertField::SanDns, "team-a.clients.example"),
        (
            CertField::SanUri,
            "spiffe://example.org/ns/search/sa/indexer",
        ),
        (CertField::SanEmail, "ops@example.org"),
    ] {
        assert_eq!(
            names.get(field),
            Some(expected),
            "{} is the first name of its kind",
            field.as_str()
        );
    }
}

#[test]
fn a_field_the_certificate_lacks_is_none() {
    let only_cn = CertificateNames::from_der(&certificate(Some("team-b"), Vec::new()));
    assert_eq!(only_cn.get(CertField::SubjectCn), Some("team-b"));
    for field in [CertField::SanDns, CertField::SanUri, CertField::SanEmail] {
        assert_eq!(only_cn.get(field), None, "{} absent", field.as_str());
    }
    let no_cn = CertificateNames::from_der(&certificate(
        None,
        vec![SanType::DnsName(ia5("svc.example"))],
    ));
    assert_eq!(no_cn.get(CertField::SubjectCn), None, "no common name");
    assert_eq!(no_cn.get(CertField::SanDns), Some("svc.example"));
}

#[test]
fn names_are_trimmed_and_unusable_ones_dropped() {
    let spaced = CertificateNames::from_der(&certificate(Some("  team-c "), Vec::new()));
    assert_eq!(spaced.get(CertField::SubjectCn), Some("team-c"), "trimmed");
    for unusable in ["   ", "team\nd", "team\u{7f}e"] {
        let names = CertificateNames::from_der(&certificate(Some(unusable), Vec::new()));
        assert_eq!(
            names.get(CertField::SubjectCn),
            None,
            "{unusable:?} names no tenant"
        );
    }
}

#[test]
fn bytes_that_are_no_certificate_name_nothing() {
    for bytes in [&b""[..], b"not a certificate", &[0x30, 0x82, 0xff, 0xff]] {
        assert_eq!(
            CertificateNames::from_der(bytes),
            CertificateNames::default(),
            "{bytes:?}"
        );
    }
}
