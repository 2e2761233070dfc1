//! nginx as the C baseline, one process per path: a plain streaming proxy (`nginx`), the same
//! terminating TLS from the client (`nginx-tls-client`), and the same speaking TLS to the backend
//! (`nginx-tls-upstream`). The three configurations are one template, so they differ only in the
//! TLS lines.
//!
//! TLS settings are nginx's defaults but for the protocol: nginx 1.22's default `ssl_protocols` /
//! `proxy_ssl_protocols` stop at TLS 1.2 (1.23.4 added 1.3), and the load client and the backend
//! speak TLS 1.3 only, as tokenmeter (rustls) does by default. The cipher suite is left to
//! negotiate: both TLS ends of the benchmark offer one suite (`super::tls`).
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Command, Stdio};

use super::pki::{Pki, SERVER_NAME};
use super::procs::{children, free_port, log_file, wait_for_port, Error, Proc};

/// Where nginx speaks TLS.
#[derive(Debug, Clone, Copy)]
pub enum NginxTls<'a> {
    /// Plain HTTP both ways.
    None,
    /// TLS from the client (`listen ... ssl`), plain HTTP to the backend.
    Client(&'a Pki),
    /// Plain HTTP from the client, TLS to the backend (`proxy_pass https://`), verified.
    Upstream(&'a Pki),
}

fn conf(dir: &Path, listen: SocketAddr, backend: SocketAddr, tls: NginxTls<'_>) -> String {
    let dir_shown = dir.display();
    let (listen_ssl, server_tls, scheme, upstream_tls) = match tls {
        NginxTls::None => ("", String::new(), "http", String::new()),
        NginxTls::Client(pki) => (
            " ssl",
            format!(
                "        ssl_certificate {};\n        ssl_certificate_key {};\n        ssl_protocols TLSv1.3;\n",
                pki.cert.display(),
                pki.key.display()
            ),
            "http",
            String::new(),
        ),
        NginxTls::Upstream(pki) => (
            "",
            String::new(),
            "https",
            // Verified like tokenmeter's [upstream.tls]: the CA, the name `localhost` (SNI too),
            // and sessions resumed when a pooled connection is replaced.
            format!(
                "            proxy_ssl_protocols TLSv1.3;\n            proxy_ssl_trusted_certificate {};\n            proxy_ssl_verify on;\n            proxy_ssl_verify_depth 2;\n            proxy_ssl_server_name on;\n            proxy_ssl_name {SERVER_NAME};\n            proxy_ssl_session_reuse on;\n",
                pki.ca.display()
            ),
        ),
    };
    format!(
        r#"# nginx as a streaming proxy: the C baseline (written by benches/overhead/nginx.rs).
worker_processes 2;
worker_rlimit_nofile 65536;
pid {dir_shown}/nginx.pid;
error_log {dir_shown}/nginx-error.log warn;
events {{ worker_connections 32768; multi_accept on; }}
http {{
    access_log off;
    client_body_temp_path {dir_shown}/client_body;
    proxy_temp_path {dir_shown}/proxy;
    fastcgi_temp_path {dir_shown}/fastcgi;
    uwsgi_temp_path {dir_shown}/uwsgi;
    scgi_temp_path {dir_shown}/scgi;
    keepalive_requests 1000000;
    upstream backend {{
        server {backend};
        keepalive 2048;
        keepalive_requests 1000000;
        keepalive_timeout 120s;
    }}
    server {{
        listen {listen}{listen_ssl} backlog=4096;
{server_tls}        location / {{
            proxy_pass {scheme}://backend;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_buffering off;
            proxy_read_timeout 600s;
{upstream_tls}        }}
    }}
}}
"#
    )
}

/// Starts nginx as path `name` (its files in `<out>/<name>/`), or `None` when there is no nginx
/// at `nginx`. Returns the process, where it listens, and its pids (master and workers).
pub fn start(
    nginx: &Path,
    out: &Path,
    name: &'static str,
    backend: SocketAddr,
    tls: NginxTls<'_>,
) -> Result<Option<(Proc, SocketAddr, Vec<u32>)>, Error> {
    if !nginx.exists() {
        eprintln!(
            "nginx not found at {}: skipping the {name} path",
            nginx.display()
        );
        return Ok(None);
    }
    let dir = std::fs::canonicalize(out)?.join(name);
    std::fs::create_dir_all(&dir)?;
    let listen = free_port()?;
    let conf_path = dir.join("nginx.conf");
    std::fs::write(&conf_path, conf(&dir, listen, backend, tls))?;
    let child = Command::new(nginx)
        .arg("-c")
        .arg(&conf_path)
        .arg("-p")
        .arg(&dir)
        .args(["-g", "daemon off;"])
        .stdout(Stdio::null())
        .stderr(log_file(out, &format!("{name}.log"))?)
        .spawn()?;
    let master = child.id();
    let proc = Proc { name, child };
    wait_for_port(listen)?;
    let mut pids = vec![master];
    pids.extend(children(master));
    Ok(Some((proc, listen, pids)))
}
