use super::*;

/// `printf %s test | sha256sum`
const TEST_DIGEST: &str = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08";

#[test]
fn a_key_is_found_by_its_digest_and_never_stored() {
    let text = format!("# keys\n\nsha256:{TEST_DIGEST} team-a   # the test key\n");
    let table = KeyTable::parse(&text).expect("parses");
    assert_eq!(table.len(), 1);
    assert_eq!(table.tenant_of(b"test").map(|t| &**t), Some("team-a"));
    assert_eq!(table.tenant_of(b"tes"), None, "another key");
    assert_eq!(
        digest(b"test").to_vec(),
        hex32(TEST_DIGEST).unwrap().to_vec(),
        "SHA-256, as sha256sum prints it"
    );
}

#[test]
fn bad_lines_name_their_line() {
    let cases = [
        (format!("sha256:{TEST_DIGEST}"), 1, "expected"),
        (format!("\nsha1:{TEST_DIGEST} a"), 2, "digest"),
        (
            format!("sha256:{} a", TEST_DIGEST.to_uppercase()),
            1,
            "digest",
        ),
        (format!("sha256:{} a", &TEST_DIGEST[1..]), 1, "digest"),
        (format!("sha256:{TEST_DIGEST} a b"), 1, "expected"),
        (
            format!("sha256:{TEST_DIGEST} a\nsha256:{TEST_DIGEST} b"),
            2,
            "twice",
        ),
    ];
    for (text, line, what) in cases {
        let (at, message) = KeyTable::parse(&text).expect_err(&text);
        assert_eq!(at, line, "{text}");
        assert!(message.contains(what), "{text}: {message}");
    }
}

#[test]
fn a_file_that_does_not_load_is_named() {
    let err = KeyTable::load(Path::new("/nonexistent/keys")).expect_err("missing");
    assert!(
        err.to_string()
            .contains("tenants.keys_file /nonexistent/keys"),
        "{err}"
    );
}
