use super::*;

/// A header map of `pairs`, in order (appended, so a name may come twice).
fn headers_of(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
    let mut headers = HeaderMap::new();
    for &(name, value) in pairs {
        headers.append(name, HeaderValue::from_static(value));
    }
    headers
}

#[test]
fn hop_by_hop_and_connection_named_headers_are_removed() {
    let mut headers = headers_of(&[
        ("connection", "keep-alive, x-secret-hop"),
        ("x-secret-hop", "1"),
        ("keep-alive", "timeout=5"),
        ("transfer-encoding", "chunked"),
        ("authorization", "Bearer sk-test"),
        ("content-type", "application/json"),
    ]);
    strip_hop_by_hop(&mut headers);
    let mut names: Vec<&str> = headers.keys().map(|k| k.as_str()).collect();
    names.sort_unstable();
    assert_eq!(
        names,
        vec!["authorization", "content-type"],
        "only end-to-end headers remain"
    );
}

#[test]
fn forwarded_headers_are_appended() {
    let mut headers = headers_of(&[("x-forwarded-for", "10.0.0.1"), ("host", "api.example")]);
    add_forwarded(&mut headers, Some("127.0.0.1".parse().expect("ip")), "http");
    assert_eq!(
        headers["x-forwarded-for"], "10.0.0.1, 127.0.0.1",
        "appended"
    );
    assert_eq!(headers["x-forwarded-proto"], "http");
    assert_eq!(headers["x-forwarded-host"], "api.example", "host moved");
    assert!(
        headers.get(header::HOST).is_none(),
        "host is set by the client from the URI"
    );
}

#[test]
fn the_backend_key_replaces_every_client_authorization() {
    let mut headers = headers_of(&[
        ("authorization", "Bearer client-key"),
        ("authorization", "Basic eA=="),
        ("content-type", "application/json"),
    ]);
    let mut backend = HeaderValue::from_static("Bearer backend-key");
    backend.set_sensitive(true);
    authorize_upstream(&mut headers, &backend);
    let sent: Vec<&HeaderValue> = headers.get_all(header::AUTHORIZATION).iter().collect();
    assert_eq!(sent, vec![&backend], "one authorization: the backend's");
    assert!(sent[0].is_sensitive(), "still marked sensitive");
    assert_eq!(
        headers[header::CONTENT_TYPE],
        "application/json",
        "other headers untouched"
    );
    let mut without = HeaderMap::new();
    authorize_upstream(&mut without, &backend);
    assert_eq!(
        without.get(header::AUTHORIZATION),
        Some(&backend),
        "added when the client sent none"
    );
}

/// The hop header line `ours` writes for a request with `headers`, parsed back into a map.
fn forwarded(ours: &InstanceId, headers: &HeaderMap) -> HeaderMap {
    let mut line = Vec::new();
    ours.write_line(headers, &mut line);
    let text = std::str::from_utf8(&line).expect("ascii");
    let value = text
        .strip_prefix("x-tokenmeter-via: ")
        .and_then(|rest| rest.strip_suffix("\r\n"))
        .unwrap_or_else(|| panic!("one header line: {text:?}"));
    let mut out = HeaderMap::new();
    out.insert(VIA, HeaderValue::from_str(value).expect("a valid value"));
    out
}

#[test]
fn the_hop_header_recognises_its_own_id_among_others_and_appends_it() {
    let ours = InstanceId::random();
    let theirs = InstanceId::random();
    assert_ne!(ours.as_str(), theirs.as_str(), "two servers, two ids");
    assert_eq!(ours.as_str().len(), 16, "64 bits in hex: {ours}");

    let from_client = HeaderMap::new();
    assert!(!ours.seen_in(&from_client), "a request from a client");
    let first = forwarded(&ours, &from_client);
    assert_eq!(first[VIA], ours.as_str(), "the first hop");
    assert!(ours.seen_in(&first), "back at the same tokenmeter");
    assert!(!theirs.seen_in(&first), "another tokenmeter lets it pass");
    let second = forwarded(&theirs, &first);
    assert_eq!(
        second[VIA],
        format!("{ours}, {theirs}").as_str(),
        "appended, in the order of the hops"
    );
    assert!(ours.seen_in(&second) && theirs.seen_in(&second));

    // Several lines, spaces, and ids that merely contain ours are read as a list of entries.
    let mut lines = HeaderMap::new();
    lines.append(VIA, HeaderValue::from_static("a"));
    lines.append(
        VIA,
        HeaderValue::from_str(&format!(" b ,{ours} ")).expect("value"),
    );
    assert!(ours.seen_in(&lines), "an entry of a second line");
    let mut longer = HeaderMap::new();
    longer.insert(
        VIA,
        HeaderValue::from_str(&format!("x{ours}, {ours}x")).expect("value"),
    );
    assert!(!ours.seen_in(&longer), "only a whole entry is our id");
    assert_eq!(
        forwarded(&theirs, &lines)[VIA],
        format!("a,  b ,{ours} , {theirs}").as_str(),
        "the lines are joined into one"
    );
}

#[test]
fn a_client_cannot_name_the_hop_header_in_connection_to_strip_it() {
    let ours = InstanceId::random();
    let mut headers = forwarded(&ours, &HeaderMap::new());
    headers.extend(headers_of(&[
        ("connection", "x-tokenmeter-via, x-other"),
        ("x-other", "1"),
    ]));
    strip_hop_by_hop(&mut headers);
    assert!(
        headers.get("x-other").is_none(),
        "the other named header goes"
    );
    assert!(ours.seen_in(&headers), "an earlier hop's id stays");
}
