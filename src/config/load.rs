//! Reading a config: TOML text (checked by `validate.rs`), a file or the shipped defaults, then
//! the environment a sidecar sets per pod. Its own file because the checks use the config's
//! types and the reading uses the checks: `load.rs` uses `validate.rs`, both use `config.rs`,
//! and `config.rs` (the types and their defaults) uses neither.
use std::net::SocketAddr;
use std::path::Path;

use super::validate::validate_upstream_url;
use super::{Config, ConfigError, ENV_BUDGET_STORE, ENV_FLEET_STORE, ENV_TENANT_KEYS_FILE};

/// Environment variables a sidecar sets per pod; they win over the file.
pub const ENV_LISTEN: &str = "TOKENMETER_LISTEN";
pub const ENV_ADMIN_LISTEN: &str = "TOKENMETER_ADMIN_LISTEN";
pub(crate) const ENV_UPSTREAM: &str = "TOKENMETER_UPSTREAM";

impl Config {
    /// Parses TOML text, naming the full key path of the first problem.
    pub fn from_toml(text: &str) -> Result<Self, ConfigError> {
        let deserializer = toml::Deserializer::new(text);
        let config: Config = serde_path_to_error::deserialize(deserializer).map_err(|err| {
            let key = err.path().to_string();
            let message = err.inner().message().trim().to_owned();
            ConfigError::Invalid { key, message }
        })?;
        config.validate()?;
        Ok(config)
    }

    /// The config as a TOML document (what `serve --check` prints): every key with a value (an
    /// unset optional key is left out, as a file would leave it out), durations as the human
    /// strings [`Config::from_toml`] accepts, and each secret replaced by [`REDACTED`](super::REDACTED) (a URL's
    /// password, the tracing exporter's header values; file paths are shown, never read).
    /// [`Config::from_toml`] reads it back to the same config, but for those secrets.
    pub fn to_toml(&self) -> Result<String, toml::ser::Error> {
        toml::to_string(self)
    }

    /// Reads a file, or the shipped defaults when no path is given, then applies the environment.
    pub fn load(path: Option<&Path>) -> Result<Self, ConfigError> {
        let mut config = match path {
            Some(path) => {
                let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
                    path: path.display().to_string(),
                    source,
                })?;
                Self::from_toml(&text)?
            }
            None => Self::default(),
        };
        config.apply_env(|var| std::env::var(var).ok())?;
        Ok(config)
    }

    /// Applies `TOKENMETER_LISTEN`, `TOKENMETER_ADMIN_LISTEN` and `TOKENMETER_UPSTREAM` (a URL, or
    /// several separated by commas), and the OpenTelemetry variables to the `[tracing]` keys the
    /// file left out ([`TracingConfig::apply_env`](super::TracingConfig::apply_env)). `lookup` is injectable so tests need not
    /// touch the process env.
    pub fn apply_env(
        &mut self,
        lookup: impl Fn(&'static str) -> Option<String>,
    ) -> Result<(), ConfigError> {
        let addr = |var: &'static str, text: String| {
            text.trim()
                .parse::<SocketAddr>()
                .map_err(|err| ConfigError::Env {
                    var,
                    message: format!("{err} (expected HOST:PORT, e.g. 0.0.0.0:8000)"),
                })
        };
        if let Some(text) = lookup(ENV_LISTEN) {
            self.server.listen = addr(ENV_LISTEN, text)?;
        }
        if let Some(text) = lookup(ENV_ADMIN_LISTEN) {
            self.server.admin_listen = addr(ENV_ADMIN_LISTEN, text)?;
        }
        if let Some(text) = lookup(ENV_UPSTREAM) {
            let urls: Vec<String> = text
                .split(',')
                .map(str::trim)
                .filter(|url| !url.is_empty())
                .map(str::to_owned)
                .collect();
            for url in &urls {
                validate_upstream_url(url).map_err(|message| ConfigError::Env {
                    var: ENV_UPSTREAM,
                    message,
                })?;
            }
            if urls.is_empty() {
                return Err(ConfigError::Env {
                    var: ENV_UPSTREAM,
                    message: "is empty".to_owned(),
                });
            }
            self.upstream.urls = urls;
        }
        self.tracing.apply_env(&lookup)?;
        if let Some(path) = lookup(ENV_TENANT_KEYS_FILE).filter(|path| !path.trim().is_empty()) {
            self.tenants.keys_file = Some(path.trim().into());
        }
        self.tenants.apply_env(&lookup);
        if let Some(store) = lookup(ENV_BUDGET_STORE).filter(|store| !store.trim().is_empty()) {
            self.tenants.budgets.store = store.trim().to_owned();
            self.tenants
                .budgets
                .validate()
                .map_err(|err| ConfigError::Env {
                    var: ENV_BUDGET_STORE,
                    message: match err {
                        ConfigError::Invalid { message, .. } => message,
                        other => other.to_string(),
                    },
                })?;
        }
        if let Some(store) = lookup(ENV_FLEET_STORE).filter(|store| !store.trim().is_empty()) {
            self.fleet.store = store.trim().to_owned();
            self.fleet.validate().map_err(|err| ConfigError::Env {
                var: ENV_FLEET_STORE,
                message: match err {
                    ConfigError::Invalid { message, .. } => message,
                    other => other.to_string(),
                },
            })?;
        }
        Ok(())
    }
}
