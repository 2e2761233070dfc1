//! The Redis clients of a store: one server, or a cluster found from its seed nodes, over TLS
//! (`rediss://`) with the CA and client certificate of its table's `store_tls`.
use std::time::Duration;

use redis::cluster::ClusterClient;
use redis::{ClientTlsConfig, TlsCertificates};

use super::error::OpenError;
use crate::config::StoreTlsConfig;
use crate::tls::pem::PemFile;

/// The client of `url`: plain, or for `rediss://` with the CA and the client certificate of
/// `tls` (read and checked here, each error naming its key under `table`).
pub(super) fn client(
    url: &str,
    tls: &StoreTlsConfig,
    table: &str,
) -> Result<redis::Client, OpenError> {
    if !url.trim_start().starts_with("rediss://") {
        return redis::Client::open(url).map_err(not_a_url);
    }
    redis::Client::build_with_tls(url, certificates(tls, table)?).map_err(not_a_url)
}

fn not_a_url(err: redis::RedisError) -> OpenError {
    OpenError::Config(format!("not a Redis URL ({:?})", err.kind()))
}

/// The client of a cluster whose nodes `seeds` (comma-separated URLs) name some of: it learns
/// the rest, and the slots, from the first that answers.
pub(super) fn cluster_client(
    seeds: &str,
    tls: &StoreTlsConfig,
    timeout: Duration,
    table: &str,
) -> Result<ClusterClient, OpenError> {
    let seeds: Vec<&str> = seeds.split(',').map(str::trim).collect();
    let mut builder = ClusterClient::builder(seeds.clone())
        .connection_timeout(timeout)
        .response_timeout(timeout);
    if seeds.iter().any(|seed| seed.starts_with("rediss://")) {
        builder = builder
            .tls(redis::cluster::TlsMode::Secure)
            .certs(certificates(tls, table)?);
    }
    builder.build().map_err(not_a_url)
}

/// The CA and client certificate of `tls`, read and checked here, each error naming its key
/// under `table`.
fn certificates(tls: &StoreTlsConfig, table: &str) -> Result<TlsCertificates, OpenError> {
    let read = |name: &str, path: &Option<std::path::PathBuf>| {
        path.as_ref()
            .map(|path| PemFile::read(format!("{table}.store_tls.{name}"), path))
            .transpose()
    };
    let ca = read("ca", &tls.ca)?;
    if let Some(ca) = &ca {
        ca.roots()?;
    }
    let client_tls = match (read("cert", &tls.cert)?, read("key", &tls.key)?) {
        (Some(cert), Some(key)) => {
            cert.certificates()?;
            key.private_key()?;
            Some(ClientTlsConfig {
                client_cert: cert.bytes,
                client_key: key.bytes,
            })
        }
        _ => None,
    };
    Ok(TlsCertificates {
        client_tls,
        root_cert: ca.map(|ca| ca.bytes),
    })
}
