//! A real nginx (Debian's, installed by scripts/install-test-deps.sh) run in the foreground from a
//! temp directory: the server blocks are the test's, the rest (pid, logs, temp paths) is here.
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use super::tls::TempDir;

/// The access log format: `$connection` (one number per TCP connection nginx accepted), the SNI
/// name, the Host header, the client certificate's subject, the status.
pub const LOG_FORMAT: &str = "$connection|$ssl_server_name|$host|$ssl_client_s_dn|$status";

/// A running nginx, stopped when dropped.
pub struct Nginx {
    child: Child,
    log: std::path::PathBuf,
}

impl Nginx {
    /// Starts nginx with `servers` (server blocks) inside its `http` block; waits until every
    /// port in `ports` accepts connections.
    pub fn start(dir: &TempDir, servers: &str, ports: &[u16]) -> Self {
        let binary = ["/usr/sbin/nginx", "/usr/bin/nginx"]
            .into_iter()
            .find(|path| std::path::Path::new(path).exists())
            .expect("nginx is installed (scripts/install-test-deps.sh installs Debian's)");
        let root = dir.0.display();
        let log = dir.path("access.log");
        let conf = format!(
            "daemon off;\nmaster_process off;\nworker_processes 1;\npid {root}/nginx.pid;\n\
             error_log {root}/error.log info;\nevents {{ worker_connections 256; }}\n\
             http {{\n  log_format tm '{LOG_FORMAT}';\n  access_log {root}/access.log tm;\n\
               client_body_temp_path {root}/body;\n  proxy_temp_path {root}/proxy;\n\
               fastcgi_temp_path {root}/fastcgi;\n  uwsgi_temp_path {root}/uwsgi;\n\
               scgi_temp_path {root}/scgi;\n{servers}\n}}\n"
        );
        let conf_path = dir.write("nginx.conf", &conf);
        let child = Command::new(binary)
            .arg("-p")
            .arg(&dir.0)
            .arg("-e")
            .arg(dir.path("error.log"))
            .arg("-c")
            .arg(&conf_path)
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("nginx starts");
        let nginx = Self { child, log };
        for port in ports {
            let deadline = std::time::Instant::now() + Duration::from_secs(10);
            while std::net::TcpStream::connect(("127.0.0.1", *port)).is_err() {
                assert!(
                    std::time::Instant::now() < deadline,
                    "nginx did not listen on {port}: {}",
                    std::fs::read_to_string(dir.path("error.log")).unwrap_or_default()
                );
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        // A port that accepts is nginx's only if nginx bound it: a bind that failed (someone else
        // holds the port) is in the error log at once, while the port still accepts for the other.
        let errors = std::fs::read_to_string(dir.path("error.log")).unwrap_or_default();
        assert!(
            !errors.contains("bind() to"),
            "nginx could not bind its ports {ports:?}: {errors}"
        );
        nginx
    }

    /// The access log once it has `lines` lines (10 s at most): nginx writes a request's line
    /// after it sent the response, so the client can see the response first.
    pub async fn access_log_of(&self, lines: usize) -> Vec<Vec<String>> {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        loop {
            let log = self.access_log();
            if log.len() >= lines || tokio::time::Instant::now() >= deadline {
                return log;
            }
            // Polled: nginx tells nothing when it has written a line. An async wait, so the
            // test's runtime (the proxy in it) keeps running meanwhile.
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// The access log's lines so far, split on `|` (see [`LOG_FORMAT`]).
    pub fn access_log(&self) -> Vec<Vec<String>> {
        std::fs::read_to_string(&self.log)
            .unwrap_or_default()
            .lines()
            .map(|line| line.split('|').map(str::to_owned).collect())
            .collect()
    }
}

impl Drop for Nginx {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A TLS server block on `port` with `cert`/`key`, proxying unbuffered to `backend` (a URL);
/// `extra` goes inside the block (say `ssl_verify_client on;`).
pub fn tls_server(port: u16, cert: &str, key: &str, backend: &str, extra: &str) -> String {
    format!(
        "  server {{\n    listen 127.0.0.1:{port} ssl;\n    ssl_certificate {cert};\n\
             ssl_certificate_key {key};\n    keepalive_requests 10000;\n    {extra}\n\
             location / {{\n      proxy_pass {backend};\n      proxy_http_version 1.1;\n\
               proxy_set_header Connection \"\";\n      proxy_buffering off;\n    }}\n  }}\n"
    )
}
