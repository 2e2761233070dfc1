//! What serde cannot check: value ranges and cross-field rules, each refusal naming its key.
use super::{BalanceLoad, Config, ConfigError, HandoffProtocol, MIN_HEADER_BYTES};

impl Config {
    /// Checks what serde cannot: value ranges and cross-field rules.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let invalid = |key: &str, message: &str| ConfigError::Invalid {
            key: key.to_owned(),
            message: message.to_owned(),
        };
        if self.upstream.urls.is_empty() && self.pools.is_empty() {
            return Err(invalid(
                "upstream.urls",
                "needs at least one upstream URL (or configure [[pools]])",
            ));
        }
        for (i, url) in self.upstream.urls.iter().enumerate() {
            validate_upstream_url(url).map_err(|m| invalid(&format!("upstream.urls[{i}]"), &m))?;
        }
        self.upstream.tls.validate("upstream.tls")?;
        self.tracing.validate()?;
        self.tenants.validate(self.server.tls.as_ref())?;
        self.fleet.validate()?;
        for (table, tls) in [
            ("server.tls", &self.server.tls),
            ("server.admin_tls", &self.server.admin_tls),
        ] {
            if let Some(tls) = tls {
                tls.validate(table)?;
            }
        }
        let positive = [
            ("upstream.connect_timeout", self.upstream.connect_timeout),
            ("upstream.response_timeout", self.upstream.response_timeout),
            ("upstream.idle_timeout", self.upstream.idle_timeout),
            ("metering.stall_threshold", self.metering.stall_threshold),
            ("server.watch_interval", self.server.watch_interval),
        ];
        for (key, value) in positive {
            if value.is_zero() {
                return Err(invalid(key, "must be greater than zero"));
            }
        }
        for (key, value) in self.slo.keyed_targets() {
            if value.is_zero() {
                return Err(invalid(&key, "must be greater than zero"));
            }
        }
        for (table, names) in [
            ("slo.models", &self.slo.models),
            ("slo.classes", &self.slo.classes),
        ] {
            if names.keys().any(|name| name.trim().is_empty()) {
                return Err(invalid(table, "a name must not be empty"));
            }
        }
        if self.server.max_request_body_bytes == 0 {
            return Err(invalid(
                "server.max_request_body_bytes",
                "must be greater than zero",
            ));
        }
        self.validate_limits()?;
        if self.metering.max_sse_line_bytes < 1024 {
            return Err(invalid(
                "metering.max_sse_line_bytes",
                "must be at least 1024",
            ));
        }
        let buckets = [
            ("buckets.ttft", &self.buckets.ttft),
            ("buckets.itl", &self.buckets.itl),
            ("buckets.tpot", &self.buckets.tpot),
            ("buckets.e2e", &self.buckets.e2e),
            ("buckets.tokens", &self.buckets.tokens),
        ];
        for (key, edges) in buckets {
            if edges.is_empty() {
                return Err(invalid(key, "needs at least one bucket edge"));
            }
            if edges.iter().any(|edge| !edge.is_finite() || *edge <= 0.0) {
                return Err(invalid(key, "bucket edges must be finite and positive"));
            }
            if edges.windows(2).any(|pair| pair[0] >= pair[1]) {
                return Err(invalid(key, "bucket edges must be strictly increasing"));
            }
        }
        self.validate_routing()
    }

    /// Request limits: every one must admit something (hyper also asserts an 8 KiB read buffer).
    fn validate_limits(&self) -> Result<(), ConfigError> {
        let invalid = |key: &str, message: &str| ConfigError::Invalid {
            key: key.to_owned(),
            message: message.to_owned(),
        };
        let s = &self.server;
        let at_least = [
            ("server.listen_backlog", s.listen_backlog as usize, 1),
            ("server.max_connections", s.max_connections, 1),
            ("server.max_streams", s.max_streams, 1),
            ("server.max_headers", s.max_headers, 1),
            (
                "server.max_header_bytes",
                s.max_header_bytes,
                MIN_HEADER_BYTES,
            ),
            (
                "server.http2_max_concurrent_streams",
                s.http2_max_concurrent_streams as usize,
                1,
            ),
        ];
        for (key, value, min) in at_least {
            if value < min {
                return Err(invalid(key, &format!("must be at least {min}")));
            }
        }
        if s.header_read_timeout.is_zero() {
            return Err(invalid(
                "server.header_read_timeout",
                "must be greater than zero",
            ));
        }
        Ok(())
    }

    fn validate_routing(&self) -> Result<(), ConfigError> {
        let invalid = |key: String, message: &str| ConfigError::Invalid {
            key,
            message: message.to_owned(),
        };
        let r = &self.routing;
        if !(r.prior_tokens_per_byte.is_finite()
            && r.prior_tokens_per_byte > 0.0
            && r.prior_tokens_per_byte <= 16.0)
        {
            return Err(invalid(
                "routing.prior_tokens_per_byte".into(),
                "must be in (0, 16]",
            ));
        }
        for (model, ratio) in &r.model_tokens_per_byte {
            if !(ratio.is_finite() && *ratio > 0.0 && *ratio <= 16.0) {
                return Err(invalid(
                    format!("routing.model_tokens_per_byte.{model:?}"),
                    "must be in (0, 16]",
                ));
            }
        }
        if r.tokenize && r.tokenize_timeout.is_zero() {
            return Err(invalid(
                "routing.tokenize_timeout".into(),
                "must be greater than zero (or set routing.tokenize = false)",
            ));
        }
        for (key, value, least) in [
            ("routing.calibration_window", r.calibration_window, 1),
            ("routing.prediction_memory", r.prediction_memory, 2),
            ("routing.eject_after_failures", r.eject_after_failures, 1),
        ] {
            if value < least {
                return Err(invalid(key.into(), &format!("must be at least {least}")));
            }
        }
        for (key, value) in [
            ("routing.eject_base", r.eject_base),
            ("routing.dns_refresh", r.dns_refresh),
        ] {
            if value.is_zero() {
                return Err(invalid(key.into(), "must be greater than zero"));
            }
        }
        if r.eject_max < r.eject_base {
            return Err(invalid(
                "routing.eject_max".into(),
                "must be at least routing.eject_base",
            ));
        }
        if !(16..=65_536).contains(&r.prefix_block_bytes) {
            return Err(invalid(
                "routing.prefix_block_bytes".into(),
                "must be in 16..=65536",
            ));
        }
        if r.prefix_key_blocks == 0 {
            return Err(invalid(
                "routing.prefix_key_blocks".into(),
                "must be at least 1",
            ));
        }
        let pools = self.effective_pools();
        for (i, pool) in self.pools.iter().enumerate() {
            if pool.name.is_empty() {
                return Err(invalid(format!("pools[{i}].name"), "must not be empty"));
            }
            if pools.iter().filter(|p| p.name == pool.name).count() > 1 {
                return Err(invalid(
                    format!("pools[{i}].name"),
                    &format!("pool {:?} is defined twice", pool.name),
                ));
            }
            if pool.urls.is_empty() && pool.dns.is_none() {
                return Err(invalid(
                    format!("pools[{i}]"),
                    "needs `urls` or `dns` (or both)",
                ));
            }
            for (j, url) in pool.urls.iter().enumerate() {
                validate_upstream_url(url)
                    .map_err(|m| invalid(format!("pools[{i}].urls[{j}]"), &m))?;
            }
            if let Some(tls) = &pool.tls {
                tls.validate(&format!("pools[{i}].tls"))?;
            }
            if let Some(dns) = &pool.dns {
                validate_dns_name(dns).map_err(|m| invalid(format!("pools[{i}].dns"), &m))?;
            }
            if !pool.health_path.starts_with('/')
                || pool.health_path.parse::<http::uri::PathAndQuery>().is_err()
            {
                return Err(invalid(
                    format!("pools[{i}].health_path"),
                    "must be a path starting with /",
                ));
            }
            if !(pool.affinity_load_factor.is_finite() && pool.affinity_load_factor >= 1.0) {
                return Err(invalid(
                    format!("pools[{i}].affinity_load_factor"),
                    "must be a number of at least 1",
                ));
            }
            if pool.affinity_index_blocks < 64 {
                return Err(invalid(
                    format!("pools[{i}].affinity_index_blocks"),
                    "must be at least 64",
                ));
            }
            // As `auto` resolved (it resolves to `slo` where `queue` or `prefill_heavy` is set).
            let balance = pools[i].balance;
            if pool.prefill_heavy.is_some() && balance != BalanceLoad::Slo {
                return Err(invalid(
                    format!("pools[{i}].prefill_heavy"),
                    "needs balance = \"slo\" (the designation weighs the replicas' learned prefill rates)",
                ));
            }
            if let Some(autoscale) = &pool.autoscale {
                if balance != BalanceLoad::Slo {
                    return Err(invalid(
                        format!("pools[{i}].autoscale"),
                        "needs balance = \"slo\" (the signal reads the backends' latency models)",
                    ));
                }
                autoscale.validate(&format!("pools[{i}].autoscale"))?;
            }
            if let Some(queue) = &pool.queue {
                if balance != BalanceLoad::Slo {
                    return Err(invalid(
                        format!("pools[{i}].queue"),
                        "needs balance = \"slo\" (the queue holds requests no backend is predicted to serve in time)",
                    ));
                }
                if queue.capacity == 0 {
                    return Err(invalid(
                        format!("pools[{i}].queue.capacity"),
                        "must be at least 1",
                    ));
                }
            }
        }
        let known = |name: &str| pools.iter().any(|p| p.name == name);
        for (i, pool) in self.pools.iter().enumerate() {
            let Some(handoff) = &pool.handoff else {
                continue;
            };
            let key = |field: &str| format!("pools[{i}].handoff.{field}");
            let prefill = self.pools.iter().find(|p| p.name == handoff.prefill_pool);
            match prefill {
                None => {
                    return Err(invalid(
                        key("prefill_pool"),
                        &format!("no pool named {:?}", handoff.prefill_pool),
                    ))
                }
                Some(p) if p.name == pool.name => {
                    return Err(invalid(
                        key("prefill_pool"),
                        "must name another pool than the one it prefills for",
                    ))
                }
                Some(p) if p.handoff.is_some() => {
                    return Err(invalid(
                        key("prefill_pool"),
                        &format!(
                            "pool {:?} hands its own prefills off: a prefill pool must run them",
                            p.name
                        ),
                    ))
                }
                Some(_) => {}
            }
            if handoff.min_prompt_tokens == 0 {
                return Err(invalid(key("min_prompt_tokens"), "must be at least 1"));
            }
            if handoff.prefill_timeout.is_zero() {
                return Err(invalid(key("prefill_timeout"), "must be greater than zero"));
            }
            if handoff.protocol == HandoffProtocol::Llamacpp && handoff.slot_dir.is_none() {
                return Err(invalid(
                    key("slot_dir"),
                    "protocol \"llamacpp\" needs the servers' --slot-save-path directory as this process sees it",
                ));
            }
        }
        for (i, rule) in self.rules.iter().enumerate() {
            if !known(&rule.pool) {
                return Err(invalid(
                    format!("rules[{i}].pool"),
                    &format!("no pool named {:?}", rule.pool),
                ));
            }
            if let Some(fallback) = &rule.fallback {
                if !known(fallback) {
                    return Err(invalid(
                        format!("rules[{i}].fallback"),
                        &format!("no pool named {fallback:?}"),
                    ));
                }
            }
        }
        Ok(())
    }
}

/// Accepts `host:port` (a name to resolve, so no scheme and no path).
fn validate_dns_name(text: &str) -> Result<(), String> {
    let Some((host, port)) = text.rsplit_once(':') else {
        return Err(format!("{text:?}: expected HOST:PORT"));
    };
    if host.is_empty() || host.contains('/') {
        return Err(format!("{text:?}: expected HOST:PORT"));
    }
    port.parse::<u16>()
        .map_err(|_| format!("{text:?}: the port is not a number"))?;
    Ok(())
}

/// Accepts `http://host:port` with no path beyond `/`; the proxy appends the client's path.
pub(super) fn validate_upstream_url(url: &str) -> Result<(), String> {
    let uri: http::Uri = url
        .parse()
        .map_err(|err| format!("{url:?} is not a URL: {err}"))?;
    if !matches!(uri.scheme_str(), Some("http" | "https")) {
        return Err(format!(
            "{url:?}: only http:// and https:// upstreams are supported"
        ));
    }
    if uri.authority().is_none() {
        return Err(format!("{url:?} has no host"));
    }
    if uri.path() != "/" && !uri.path().is_empty() {
        return Err(format!("{url:?}: a base URL takes no path"));
    }
    Ok(())
}
