//! Binding the traffic and admin listeners from the config, naming what set an address that
//! cannot be bound (a key, the environment variable that overrides it, a flag).
use tokio::net::TcpListener;

use super::error::ServerError;
use super::listen::listen;
use crate::config::{Config, ENV_ADMIN_LISTEN, ENV_LISTEN};

/// What set each listener's address (a config key, an environment variable, a command-line
/// flag), named when the address cannot be bound: the operator then knows what to change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListenOrigins {
    pub traffic: String,
    pub admin: String,
}

impl ListenOrigins {
    /// The keys, and the environment variables that override them, when it is not known which
    /// of the two set the address.
    pub fn either() -> Self {
        let both = |key: &str, var: &str| format!("{key}, or {var} when set");
        Self {
            traffic: both("server.listen", ENV_LISTEN),
            admin: both("server.admin_listen", ENV_ADMIN_LISTEN),
        }
    }

    /// The environment variable where `is_set` says it is set (it wins over the file, as
    /// [`Config::apply_env`] applies it), else the key.
    pub fn from_env(is_set: impl Fn(&'static str) -> bool) -> Self {
        let origin = |key: &str, var: &'static str| {
            if is_set(var) {
                format!("{var}, which overrides {key}")
            } else {
                key.to_owned()
            }
        };
        Self {
            traffic: origin("server.listen", ENV_LISTEN),
            admin: origin("server.admin_listen", ENV_ADMIN_LISTEN),
        }
    }
}

/// Binds the traffic and admin listeners from the config.
/// Both listen with `server.listen_backlog` (see [`listen()`]).
pub async fn bind(config: &Config) -> Result<(TcpListener, TcpListener), ServerError> {
    bind_from(config, &ListenOrigins::either()).await
}

/// [`bind`], naming what set an address that cannot be bound as `origins` says.
pub async fn bind_from(
    config: &Config,
    origins: &ListenOrigins,
) -> Result<(TcpListener, TcpListener), ServerError> {
    let backlog = config.server.listen_backlog;
    let bind = |what, addr, origin: &String| {
        listen(addr, backlog).map_err(|source| ServerError::Bind {
            what,
            addr,
            origin: origin.clone(),
            source,
        })
    };
    let traffic = bind("traffic", config.server.listen, &origins.traffic)?;
    let admin = bind("admin", config.server.admin_listen, &origins.admin)?;
    Ok((traffic, admin))
}
