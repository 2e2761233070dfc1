use super::*;

#[test]
fn hop_by_hop_and_connection_named_headers_are_removed() {
    let mut headers = HeaderMap::new();
    headers.insert(
        header::CONNECTION,
        HeaderValue::from_static("keep-alive, x-secret-hop"),
    );
    headers.insert("x-secret-hop", HeaderValue::from_static("1"));
    headers.insert("keep-alive", HeaderValue::from_static("timeout=5"));
    headers.insert(
        header::TRANSFER_ENCODING,
        HeaderValue::from_static("chunked"),
    );
    headers.insert(
        header::AUTHORIZATION,
        HeaderValue::from_static("Bearer sk-test"),
    );
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
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
    let mut headers = HeaderMap::new();
    headers.insert("x-forwarded-for", HeaderValue::from_static("10.0.0.1"));
    headers.insert(header::HOST, HeaderValue::from_static("api.example"));
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
    let mut headers = HeaderMap::new();
    headers.append(
        header::AUTHORIZATION,
        HeaderValue::from_static("Bearer client-key"),
    );
    headers.append(
        header::AUTHORIZATION,
        HeaderValue::from_static("Basic eA=="),
    );
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
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
