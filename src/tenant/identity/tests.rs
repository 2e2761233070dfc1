use http::HeaderValue;

use super::*;

const TEST_DIGEST: &str = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08";

fn identity(sources: &[TenantSource], anonymous: Anonymous) -> Identity {
    Identity {
        sources: sources.to_vec(),
        header: HeaderName::from_static("x-tenant-id"),
        keys: KeyTable::parse(&format!("sha256:{TEST_DIGEST} team-a")).unwrap(),
        anonymous,
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
    assert_eq!(both.resolve(&request), Ok(Some("gw-b")), "the header first");
    let keys_first = identity(
        &[TenantSource::ApiKey, TenantSource::Header],
        Anonymous::Allow,
    );
    assert_eq!(
        keys_first.resolve(&request),
        Ok(Some("team-a")),
        "the key first"
    );
    let no_key = headers(&[("x-tenant-id", "gw-b")]);
    assert_eq!(
        keys_first.resolve(&no_key),
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
            keys.resolve(&headers(&[("authorization", value)])),
            expected,
            "{value}"
        );
    }
    assert_eq!(keys.resolve(&HeaderMap::new()), Err(Unnamed::Nobody));
    let allow = identity(&[TenantSource::ApiKey], Anonymous::Allow);
    assert_eq!(
        allow.resolve(&headers(&[("authorization", "Bearer other")])),
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
    ] {
        assert!(!unnamed.message().contains("test"));
    }
}
