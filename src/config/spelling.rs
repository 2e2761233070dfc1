//! How values are spelled in the config file, both ways: durations as human strings (`"800ms"`),
//! header names in lower case, and secrets (a URL's password) replaced by [`REDACTED`] when the
//! config is printed. The serde attributes of every table name these (`config.rs`'s and each
//! table's file), so they are in a file of their own, which uses none of them.
use std::time::Duration;

use serde::{Deserialize, Deserializer, Serializer};

/// What a secret is printed as (see [`redacted`]).
pub const REDACTED: &str = "***";

/// Human durations (`"800ms"`, `"2s"`, `"1m 30s"`), never bare numbers whose unit a reader must guess.
pub(super) fn duration<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Duration, D::Error> {
    let text = String::deserialize(deserializer)?;
    humantime::parse_duration(&text).map_err(|err| {
        serde::de::Error::custom(format!(
            "invalid duration {text:?}: {err} (write e.g. \"800ms\" or \"2s\")"
        ))
    })
}

/// A duration written as [`duration`] reads it (`"800ms"`, `"1m 30s"`, `"0s"`).
pub(super) fn human<S: Serializer>(value: &Duration, serializer: S) -> Result<S::Ok, S::Error> {
    serializer.collect_str(&humantime::format_duration(*value))
}

/// An optional [`duration`]: a key given is `Some` (a key left out takes the table's default).
pub(super) fn some_duration<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<Duration>, D::Error> {
    duration(deserializer).map(Some)
}

/// An optional [`human`] duration; `None` is left out (the field has `skip_serializing_if`).
pub(super) fn some_human<S: Serializer>(
    value: &Option<Duration>,
    serializer: S,
) -> Result<S::Ok, S::Error> {
    some(value, serializer, human)
}

/// `#[serde(with = "super::spelling::human_duration")]`: a [`Duration`] read by [`duration`] and
/// written by [`human`], so that a duration key takes one attribute, not the pair.
pub(super) mod human_duration {
    pub(in crate::config) use super::{duration as deserialize, human as serialize};
}

/// [`human_duration`] for an optional key (with `skip_serializing_if = "Option::is_none"`).
pub(super) mod some_human_duration {
    pub(in crate::config) use super::{some_duration as deserialize, some_human as serialize};
}

/// Writes `Some` as `each` writes its value, `None` as nothing: the one shape of every optional
/// spelling here.
fn some<T, S: Serializer>(
    value: &Option<T>,
    serializer: S,
    each: impl FnOnce(&T, S) -> Result<S::Ok, S::Error>,
) -> Result<S::Ok, S::Error> {
    match value {
        Some(value) => each(value, serializer),
        None => serializer.serialize_none(),
    }
}

/// A header name as the config spells it (lower case).
pub(super) fn header_text<S: Serializer>(
    name: &http::HeaderName,
    serializer: S,
) -> Result<S::Ok, S::Error> {
    serializer.serialize_str(name.as_str())
}

/// An optional [`header_text`]; `None` is left out (the field has `skip_serializing_if`).
pub(super) fn some_header_text<S: Serializer>(
    name: &Option<http::HeaderName>,
    serializer: S,
) -> Result<S::Ok, S::Error> {
    some(name, serializer, header_text)
}

/// A URL with the password of its authority (between the user's `:` and the `@`) replaced by
/// [`REDACTED`]; a user without a password too (`redis://TOKEN@host` carries a secret there).
/// Anything else is returned as it is.
pub(crate) fn redacted(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let (authority, path) = rest.split_at(rest.find(['/', '?', '#']).unwrap_or(rest.len()));
    let Some((userinfo, host)) = authority.rsplit_once('@') else {
        return url.to_owned();
    };
    match userinfo.split_once(':') {
        Some((user, _password)) => format!("{scheme}://{user}:{REDACTED}@{host}{path}"),
        None => format!("{scheme}://{REDACTED}@{host}{path}"),
    }
}

/// A URL that may carry a password (`http://user:password@host`), printed without it.
pub(super) fn secret_url<S: Serializer>(url: &str, serializer: S) -> Result<S::Ok, S::Error> {
    serializer.serialize_str(&redacted(url))
}

/// An optional [`secret_url`]; `None` is left out (the field has `skip_serializing_if`).
pub(super) fn some_secret_url<S: Serializer>(
    url: &Option<String>,
    serializer: S,
) -> Result<S::Ok, S::Error> {
    some(url, serializer, |url, serializer| {
        secret_url(url, serializer)
    })
}

/// URLs, each printed as [`secret_url`].
pub(super) fn secret_urls<S: Serializer>(
    urls: &[String],
    serializer: S,
) -> Result<S::Ok, S::Error> {
    serializer.collect_seq(urls.iter().map(|url| redacted(url)))
}
