//! The `client_cert` tenant source end to end: the real server with `[server.tls]` requiring
//! client certificates, Rust TLS clients presenting certificates of two tenants (over HTTP/1.1 and
//! over one h2 connection carrying several streams), the exact per-tenant lines of `/metrics`; the
//! order of sources against a header; a certificate without the configured name (anonymous, or
//! refused with a 401), a reload that changes the field under an open connection, and a connection
//! without a certificate, which the handshake refuses.

use crate::support;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{Request, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokenmeter::config::{Anonymous, CertField, Config, ServerTlsConfig, TenantSource};
use tokenmeter::server::ServerHandle;

use support::backend::{replay, Backend};
use support::tls::{client_config, Ca, TempDir};
use support::{client, config_for, prom, start_proxy, wait_for_metric};

const CHAT: &str = "/v1/chat/completions";
const BODY: &str = r#"{"model":"m1","stream":true,"messages":[{"role":"user","content":"hi"}]}"#;

/// A test PKI: the CA, the files of the proxy's listener, and client identities by name.
struct Pki {
    dir: TempDir,
    ca: Ca,
    ca_file: PathBuf,
}

impl Pki {
    fn new(name: &str) -> Self {
        let dir = TempDir::new(name);
        let ca = Ca::new("tokenmeter test CA");
        let ca_file = dir.write("ca.crt", &ca.pem);
        Self { dir, ca, ca_file }
    }

    /// `[server.tls]` serving `localhost`, requiring certificates of the CA.
    fn server_tls(&self) -> ServerTlsConfig {
        let (cert, key) = self.ca.server().write(&self.dir, "server");
        ServerTlsConfig {
            cert,
            key,
            client_ca: Some(self.ca_file.clone()),
            reload_interval: Duration::from_secs(10),
        }
    }

    /// A client certificate whose subject CN and only DNS name are `name`.
    fn client(&self, name: &str) -> (PathBuf, PathBuf) {
        self.ca.client(name).write(&self.dir, name)
    }

    /// A TLS client config trusting the CA, presenting `identity`, offering `alpn`.
    fn client_config(
        &self,
        identity: Option<&(PathBuf, PathBuf)>,
        alpn: &[u8],
    ) -> Arc<rustls::ClientConfig> {
        let identity = identity.map(|(cert, key)| (cert.as_path(), key.as_path()));
        let mut config = client_config(&self.ca_file, identity);
        config.alpn_protocols = vec![alpn.to_vec()];
        Arc::new(config)
    }
}

/// A proxy config in front of `backend` with `pki`'s TLS and these tenant sources.
fn mtls_config(
    backend: &Backend,
    pki: &Pki,
    sources: &[TenantSource],
    anonymous: Anonymous,
) -> Config {
    let mut config = config_for(&backend.url);
    config.server.tls = Some(pki.server_tls());
    config.tenants.sources = sources.to_vec();
    config.tenants.anonymous = anonymous;
    config.validate().expect("valid config");
    config
}

/// One client connection: HTTP/1.1 keep-alive, or h2 streams.
enum Connection {
    Http1(hyper::client::conn::http1::SendRequest<Full<Bytes>>),
    Http2(hyper::client::conn::http2::SendRequest<Full<Bytes>>),
}

impl Connection {
    /// A TLS connection to the proxy under `config`, speaking what ALPN agreed.
    async fn open(addr: SocketAddr, config: Arc<rustls::ClientConfig>) -> Self {
        let tcp = tokio::net::TcpStream::connect(addr)
            .await
            .expect("connect to the proxy");
        let name = rustls_pki_types::ServerName::try_from("localhost").expect("a name");
        let tls = tokio_rustls::TlsConnector::from(config)
            .connect(name, tcp)
            .await
            .expect("TLS handshake with the proxy");
        let h2 = tls.get_ref().1.alpn_protocol() == Some(b"h2");
        let io = TokioIo::new(tls);
        if h2 {
            let (sender, connection) =
                hyper::client::conn::http2::handshake(TokioExecutor::new(), io)
                    .await
                    .expect("h2 handshake");
            tokio::spawn(connection);
            Connection::Http2(sender)
        } else {
            let (sender, connection) = hyper::client::conn::http1::handshake(io)
                .await
                .expect("HTTP/1.1 handshake");
            tokio::spawn(connection);
            Connection::Http1(sender)
        }
    }

    /// Posts the chat request with `headers` and reads the whole answer.
    async fn post(&mut self, headers: &[(&str, &str)]) -> (StatusCode, Bytes) {
        let mut builder = Request::builder()
            .method("POST")
            .header("content-type", "application/json");
        builder = match self {
            Connection::Http1(_) => builder.uri(CHAT).header("host", "localhost"),
            Connection::Http2(_) => builder.uri(format!("https://localhost{CHAT}")),
        };
        for (name, value) in headers {
            builder = builder.header(*name, *value);
        }
        let request = builder
            .body(Full::new(Bytes::from_static(BODY.as_bytes())))
            .expect("a request");
        let response = match self {
            Connection::Http1(sender) => {
                sender.ready().await.expect("the connection is open");
                sender.send_request(request).await
            }
            Connection::Http2(sender) => {
                sender.ready().await.expect("the connection is open");
                sender.send_request(request).await
            }
        }
        .expect("a response from the proxy");
        let status = response.status();
        let body = response
            .into_body()
            .collect()
            .await
            .expect("the whole body")
            .to_bytes();
        (status, body)
    }
}

/// The proxy's `/metrics`, scraped from its admin listener.
async fn scrape(proxy: &ServerHandle) -> String {
    let (status, text) = client::get(proxy.admin_addr, "/metrics").await;
    assert_eq!(status, 200, "the scrape answers");
    text
}

/// The `tokenmeter_tenant_requests_total` lines of `text`, sorted.
fn tenant_lines(text: &str) -> Vec<&str> {
    let mut lines: Vec<&str> = text
        .lines()
        .filter(|line| line.starts_with("tokenmeter_tenant_requests_total{"))
        .collect();
    lines.sort_unstable();
    lines
}

#[tokio::test]
async fn client_certificates_name_their_tenants_per_connection() {
    let pki = Pki::new("tenant-mtls");
    let backend = Backend::start(replay("vllm-chat-usage.sse", Duration::ZERO)).await;
    let proxy = start_proxy(mtls_config(
        &backend,
        &pki,
        &[TenantSource::ClientCert],
        Anonymous::Refuse,
    ))
    .await;
    let team_a = pki.client("team-a");
    let team_b = pki.client("team-b");

    // team-a: three streams on one h2 connection and one on an HTTP/1.1 connection of its own.
    let mut h2 =
        Connection::open(proxy.traffic_addr, pki.client_config(Some(&team_a), b"h2")).await;
    assert!(matches!(h2, Connection::Http2(_)), "ALPN chose h2");
    for _ in 0..3 {
        assert_eq!(h2.post(&[]).await.0, StatusCode::OK);
    }
    let mut h1 = Connection::open(
        proxy.traffic_addr,
        pki.client_config(Some(&team_a), b"http/1.1"),
    )
    .await;
    assert!(matches!(h1, Connection::Http1(_)), "ALPN chose HTTP/1.1");
    assert_eq!(h1.post(&[]).await.0, StatusCode::OK);
    // team-b: two requests on one keep-alive HTTP/1.1 connection. A header names nobody: the
    // only source is the certificate.
    let mut b = Connection::open(
        proxy.traffic_addr,
        pki.client_config(Some(&team_b), b"http/1.1"),
    )
    .await;
    for _ in 0..2 {
        let (status, _) = b.post(&[("x-tenant-id", "team-a")]).await;
        assert_eq!(status, StatusCode::OK);
    }

    let text = scrape(&proxy).await;
    assert_eq!(
        tenant_lines(&text),
        [
            r#"tokenmeter_tenant_requests_total{tenant="team-a",outcome="ok"} 4"#,
            r#"tokenmeter_tenant_requests_total{tenant="team-b",outcome="ok"} 2"#,
        ],
        "each certificate's tenant, every request counted once"
    );
    proxy.shutdown().await;
}

#[tokio::test]
async fn the_sources_are_tried_in_the_configured_order() {
    let pki = Pki::new("tenant-mtls-order");
    let backend = Backend::start(replay("vllm-chat-usage.sse", Duration::ZERO)).await;
    let header_first = mtls_config(
        &backend,
        &pki,
        &[TenantSource::Header, TenantSource::ClientCert],
        Anonymous::Refuse,
    );
    let proxy = start_proxy(header_first.clone()).await;
    let team_a = pki.client("team-a");
    let mut open = Connection::open(
        proxy.traffic_addr,
        pki.client_config(Some(&team_a), b"http/1.1"),
    )
    .await;
    assert_eq!(open.post(&[("x-tenant-id", "gateway-x")]).await.0, 200);
    assert_eq!(open.post(&[]).await.0, 200);
    assert_eq!(
        tenant_lines(&scrape(&proxy).await),
        [
            r#"tokenmeter_tenant_requests_total{tenant="gateway-x",outcome="ok"} 1"#,
            r#"tokenmeter_tenant_requests_total{tenant="team-a",outcome="ok"} 1"#,
        ],
        "the header first, then the certificate"
    );

    // The reverse order, on the same open connection: its certificate names were read at the
    // handshake, the sources are the revision's.
    let mut cert_first = header_first;
    cert_first.tenants.sources = vec![TenantSource::ClientCert, TenantSource::Header];
    proxy.reload(cert_first).await.expect("reload");
    assert_eq!(open.post(&[("x-tenant-id", "gateway-x")]).await.0, 200);
    assert_eq!(
        tenant_lines(&scrape(&proxy).await),
        [
            r#"tokenmeter_tenant_requests_total{tenant="gateway-x",outcome="ok"} 1"#,
            r#"tokenmeter_tenant_requests_total{tenant="team-a",outcome="ok"} 2"#,
        ],
        "the certificate first: the header is not read"
    );
    proxy.shutdown().await;
}

#[tokio::test]
async fn a_certificate_without_the_name_is_anonymous_or_refused_and_no_certificate_no_handshake() {
    let pki = Pki::new("tenant-mtls-anonymous");
    let backend = Backend::start(replay("vllm-chat-usage.sse", Duration::ZERO)).await;
    let mut config = mtls_config(
        &backend,
        &pki,
        &[TenantSource::ClientCert],
        Anonymous::Allow,
    );
    // The test certificates carry a CN and a DNS name, no e-mail address.
    config.tenants.cert_field = CertField::SanEmail;
    let proxy = start_proxy(config.clone()).await;
    let team_a = pki.client("team-a");
    let mut open =
        Connection::open(proxy.traffic_addr, pki.client_config(Some(&team_a), b"h2")).await;
    assert_eq!(open.post(&[]).await.0, 200, "allowed as anonymous");

    config.tenants.anonymous = Anonymous::Refuse;
    proxy.reload(config.clone()).await.expect("reload");
    let (status, body) = open.post(&[]).await;
    assert_eq!(status, 401, "refused");
    let body: serde_json::Value = serde_json::from_slice(&body).expect("a JSON error");
    assert_eq!(
        body["error"]["message"],
        "no tenant: the client certificate has no e-mail name"
    );
    assert_eq!(body["error"]["type"], "authentication_error");

    // The field is the revision's: the same connection now names its tenant by the DNS name.
    config.tenants.cert_field = CertField::SanDns;
    proxy.reload(config).await.expect("reload");
    assert_eq!(open.post(&[]).await.0, 200, "named by the DNS name");

    let text = scrape(&proxy).await;
    assert_eq!(
        tenant_lines(&text),
        [
            r#"tokenmeter_tenant_requests_total{tenant="anonymous",outcome="ok"} 1"#,
            r#"tokenmeter_tenant_requests_total{tenant="team-a",outcome="ok"} 1"#,
        ],
        "the refusal has no tenant"
    );
    assert_eq!(
        prom::sum(
            &text,
            "tokenmeter_requests_total",
            &[("outcome", "client_error")]
        ),
        1.0,
        "the refusal is a client error"
    );

    // No certificate: the handshake (or the first read after it, in TLS 1.3) fails; no request.
    let tcp = tokio::net::TcpStream::connect(proxy.traffic_addr)
        .await
        .expect("connect");
    let name = rustls_pki_types::ServerName::try_from("localhost").expect("a name");
    let refused = match tokio_rustls::TlsConnector::from(pki.client_config(None, b"http/1.1"))
        .connect(name, tcp)
        .await
    {
        Err(_) => true,
        Ok(tls) => {
            let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(tls))
                .await
                .expect("HTTP/1.1 over the TLS stream");
            tokio::spawn(connection);
            let request = Request::post(CHAT)
                .header("host", "localhost")
                .body(Full::new(Bytes::from_static(BODY.as_bytes())))
                .expect("a request");
            sender.send_request(request).await.is_err()
        }
    };
    assert!(refused, "a connection without a certificate gets no answer");
    wait_for_metric(
        &proxy,
        "tokenmeter_tls_handshake_failures_total",
        &[("listener", "traffic"), ("reason", "certificate")],
        1.0,
    )
    .await;
    assert_eq!(
        tenant_lines(&scrape(&proxy).await).len(),
        2,
        "nothing more was counted"
    );
    proxy.shutdown().await;
}
