//! Server configuration: embedded defaults, then a TOML file, then `SLUICE_*`
//! environment variables, then command-line flags (each layer overrides the
//! one before it).
//!
//! Invariants:
//! - A value is only ever taken from one layer: the highest one that sets it.
//! - Every layer is validated the same way; a typo (an unknown TOML key, a
//!   malformed environment value) is an error naming the key and its source,
//!   never silently ignored.
//! - The configuration file is read through `DurableStorage`, like every
//!   other file sluice touches (docs/adr/0001-architecture.md).
//! - No secret lives here: root credentials come from their own environment
//!   variables (`crate::http::auth`), never from the file, and `Debug` output
//!   is safe to log.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;
use sluice_storage::DurableStorage;

/// Embedded default data directory, relative to the working directory.
pub(crate) const DEFAULT_DATA_DIR: &str = "local_data";
/// Embedded default HTTP listen address.
#[cfg(test)]
pub(crate) const DEFAULT_HTTP_ADDRESS: &str = "127.0.0.1:3000";
/// Default request body limit (bytes). Large enough for a sizeable batch after
/// base64 (4/3 of the payload), well under the engine's batch bound.
pub(crate) const DEFAULT_MAX_BODY_BYTES: usize = 10 << 20;
pub(crate) const DEFAULT_RECONCILER_PERIOD_MS: u64 = 1000;
/// Cleanup is mostly waiting on fsyncs, so more partitions than cores.
pub const DEFAULT_RECONCILER_CONCURRENCY: usize =
    crate::partition::reconciler::DEFAULT_CLEANUP_CONCURRENCY;
const MAX_RECONCILER_CONCURRENCY: u64 = 256;
const MAX_APPEND_CONCURRENCY: u64 = 256;
/// About 584 years less a margin: the expiry in microseconds fits a u64.
const MAX_MESSAGE_EXPIRY_SECS: u64 = u64::MAX / 1_000_000 / 2;
pub(crate) const DEFAULT_TOKEN_EXPIRY_SECS: u64 = 3600;
pub(crate) const DEFAULT_FAILED_LOGIN_DELAY_MS: u64 = 500;
/// How often expired personal access tokens are removed: Iggy's
/// `[personal_access_token.cleaner] interval`, 1 minute.
pub(crate) const DEFAULT_TOKEN_CLEANER_PERIOD_SECS: u64 = 60;
pub(crate) const DEFAULT_MAX_POLL_COUNT: u32 = 10_000;
/// Embedded default TCP (Iggy binary protocol) listen address, Iggy's.
#[cfg(test)]
pub(crate) const DEFAULT_TCP_ADDRESS: &str = "127.0.0.1:8090";
/// Largest TCP frame (header + body) accepted; a larger declared size closes
/// the connection before the body is read.
pub(crate) const DEFAULT_TCP_MAX_FRAME_BYTES: usize = 64 << 20;
pub(crate) const DEFAULT_TCP_MAX_CONNECTIONS: usize = 1024;
/// A connection that sends nothing for this long is closed (the SDK pings
/// every 5 s by default).
pub(crate) const DEFAULT_TCP_IDLE_TIMEOUT_SECS: u64 = 300;
/// The bound the README suggests for `[files] max_open` (ADR 0018): below the
/// common soft limit of 1,024 with a quarter of it left for connections, the
/// data directory, the binary's own files and the standard streams. Not the
/// default: the pool is opt-in until the bounded simulator runs are clean
/// (ADR 0018, "Open findings").
pub const SUGGESTED_MAX_OPEN_FILES: usize = 768;
/// The largest bound accepted: Linux's default `fs.nr_open`.
const MAX_OPEN_FILES_LIMIT: u64 = 1 << 20;

/// The whole server configuration, after every layer was applied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerConfig {
    pub data_dir: PathBuf,
    pub http: HttpConfig,
    pub tcp: TcpConfig,
    pub reconciler: ReconcilerSettings,
    pub auth: AuthConfig,
    pub retention: RetentionSettings,
    pub files: FileSettings,
    /// The remote tier (`[tiering]`, ADR 0027); `None`: no tiering.
    pub tiering: Option<TieringSettings>,
}

/// Where the remote tier lives (`[tiering] store`).
#[derive(Clone, PartialEq, Eq)]
pub enum TierStore {
    /// `object_store`'s local file system store, with fsync, at this
    /// directory (`path`, relative to the data directory unless absolute).
    Local(PathBuf),
    /// An S3-compatible bucket.
    S3 {
        bucket: String,
        region: String,
        endpoint: Option<String>,
        access_key_id: String,
        /// Never logged (`Debug` hides it).
        secret_access_key: String,
        allow_http: bool,
    },
}

impl std::fmt::Debug for TierStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TierStore::Local(path) => f.debug_tuple("Local").field(path).finish(),
            TierStore::S3 {
                bucket,
                region,
                endpoint,
                allow_http,
                ..
            } => f
                .debug_struct("S3")
                .field("bucket", bucket)
                .field("region", region)
                .field("endpoint", endpoint)
                .field("allow_http", allow_http)
                .finish_non_exhaustive(),
        }
    }
}

/// `[tiering]`: the store, this server's prefix in it, the read cache, and
/// the topics that opted in with their local retention.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TieringSettings {
    pub store: TierStore,
    pub engine: crate::engine::TieringConfig,
    /// How often the server runs a tiering pass.
    pub period: Duration,
}

/// The bounded pool of open files (ADR 0018).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileSettings {
    /// At most this many data files open at once (`[files] max_open`);
    /// `None` (the default, `max_open = 0`): no pool, one descriptor per
    /// data file for the life of the process.
    pub max_open: Option<usize>,
    /// Partitions a combined send appends to at once (`[files]
    /// append_concurrency`, ADR 0030); 1 appends them one after another.
    pub append_concurrency: usize,
    /// Whether a growing segment reserves its file's blocks ahead of its
    /// appends (`[files] reserve_blocks`, ADR 0031; on by default). Off,
    /// every block is allocated by the write that needs it, and `du` of a
    /// segment being written counts no more than it holds once it has
    /// rolled past what an earlier run reserved. It is a property of the
    /// storage backend: the `sluice server` binary builds its
    /// `DiskStorage` from it; `server::start` takes the backend it is given.
    pub reserve_blocks: bool,
}

/// Retention defaults (ADR 0016).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RetentionSettings {
    /// The `message_expiry` of a topic created with Iggy's "server default"
    /// (0 on the wire); `None`: such topics never expire.
    pub message_expiry: Option<Duration>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpConfig {
    pub address: SocketAddr,
    /// Requests with a larger body are refused with 413 before they are read.
    pub max_body_bytes: usize,
    /// Most messages one poll is served (over both transports); a poll asking
    /// for more gets this many (`Limits::poll_count`).
    pub(crate) max_poll_count: u32,
    /// HTTPS instead of HTTP on `address` (`[http.tls]`).
    pub tls: TlsSettings,
}

/// The Iggy TCP binary protocol listener (`crate::tcp`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TcpConfig {
    /// `false` serves HTTP only.
    pub(crate) enabled: bool,
    pub address: SocketAddr,
    /// Frames declaring a larger size close the connection unread.
    pub max_frame_bytes: usize,
    /// Connections beyond this are closed as soon as they are accepted.
    pub max_connections: usize,
    /// A connection silent this long (no complete frame) is closed; a TLS
    /// handshake that takes longer is abandoned.
    pub idle_timeout: Duration,
    /// TLS instead of plaintext on `address` (`[tcp.tls]`).
    pub tls: TlsSettings,
}

/// TLS on one listener, as Iggy's `[tcp.tls]` and `[http.tls]` (ADR 0023):
/// when enabled, the listener speaks only TLS on its port. The files are read
/// at start-up; a missing or invalid one stops the start with an error
/// naming it (`crate::tls`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TlsSettings {
    /// `false` (the default): plaintext.
    pub enabled: bool,
    /// PEM: the certificate chain, the server's own certificate first.
    pub cert_file: PathBuf,
    /// PEM: the certificate's private key (PKCS#8, PKCS#1 or SEC1). Its path
    /// is logged with the configuration; its contents never are.
    pub key_file: PathBuf,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReconcilerSettings {
    /// How often the server runs a purge-cleanup pass.
    pub period: Duration,
    /// Partitions cleaned at the same time within a pass.
    pub concurrency: usize,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuthConfig {
    /// Lifetime of an access token issued by `POST /users/login`.
    pub token_expiry: Duration,
    /// Base delay added to a failed login; it doubles with every consecutive
    /// failure (capped at 32x) and resets on success.
    pub failed_login_delay: Duration,
    /// How often expired personal access tokens are removed (Iggy's token
    /// cleaner, every minute); until then they are listed, as in Iggy. Not a
    /// file or environment setting: tests shorten it.
    pub token_cleaner_period: Duration,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            data_dir: PathBuf::from(DEFAULT_DATA_DIR),
            http: HttpConfig {
                address: SocketAddr::from(([127, 0, 0, 1], 3000)),
                max_body_bytes: DEFAULT_MAX_BODY_BYTES,
                max_poll_count: DEFAULT_MAX_POLL_COUNT,
                tls: TlsSettings::default(),
            },
            tcp: TcpConfig {
                enabled: true,
                address: SocketAddr::from(([127, 0, 0, 1], 8090)),
                max_frame_bytes: DEFAULT_TCP_MAX_FRAME_BYTES,
                max_connections: DEFAULT_TCP_MAX_CONNECTIONS,
                idle_timeout: Duration::from_secs(DEFAULT_TCP_IDLE_TIMEOUT_SECS),
                tls: TlsSettings::default(),
            },
            reconciler: ReconcilerSettings {
                period: Duration::from_millis(DEFAULT_RECONCILER_PERIOD_MS),
                concurrency: DEFAULT_RECONCILER_CONCURRENCY,
            },
            auth: AuthConfig {
                token_expiry: Duration::from_secs(DEFAULT_TOKEN_EXPIRY_SECS),
                failed_login_delay: Duration::from_millis(DEFAULT_FAILED_LOGIN_DELAY_MS),
                token_cleaner_period: Duration::from_secs(DEFAULT_TOKEN_CLEANER_PERIOD_SECS),
            },
            // As Iggy ships: messages never expire unless a topic says so.
            retention: RetentionSettings {
                message_expiry: None,
            },
            files: FileSettings {
                max_open: None,
                append_concurrency: crate::engine::DEFAULT_APPEND_CONCURRENCY,
                reserve_blocks: true,
            },
            tiering: None,
        }
    }
}

/// Why a configuration could not be built. Each variant names the key and
/// where the bad value came from.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config file {}: {reason}", path.display())]
    Read { path: PathBuf, reason: String },
    #[error("config file {}: {reason}", path.display())]
    Parse { path: PathBuf, reason: String },
    #[error("{source_name}: invalid value {value:?} for {key}: {reason}")]
    Invalid {
        source_name: String,
        key: &'static str,
        value: String,
        reason: String,
    },
}

/// The file layer: every key optional, unknown keys refused.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileConfig {
    data_dir: Option<PathBuf>,
    #[serde(default)]
    http: FileHttp,
    #[serde(default)]
    tcp: FileTcp,
    #[serde(default)]
    reconciler: FileReconciler,
    #[serde(default)]
    auth: FileAuth,
    #[serde(default)]
    retention: FileRetention,
    #[serde(default)]
    files: FileFiles,
    tiering: Option<FileTiering>,
}

/// `[tiering]` as the file writes it.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileTiering {
    /// `local` (the default) or `s3`.
    store: Option<String>,
    path: Option<PathBuf>,
    instance: Option<String>,
    cache_mib: Option<u64>,
    period_ms: Option<u64>,
    orphan_grace_secs: Option<u64>,
    sweep_period_secs: Option<u64>,
    bucket: Option<String>,
    region: Option<String>,
    endpoint: Option<String>,
    access_key_id: Option<String>,
    secret_access_key: Option<String>,
    allow_http: Option<bool>,
    #[serde(default)]
    topics: Vec<FileTieredTopic>,
}

/// One `[[tiering.topics]]` entry.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileTieredTopic {
    stream: String,
    topic: String,
    local_retention_bytes: Option<u64>,
    local_retention_secs: Option<u64>,
}

/// The default key prefix of this server in the store.
const DEFAULT_TIER_INSTANCE: &str = "sluice";
/// The default local store directory, under the data directory.
const DEFAULT_TIER_DIR: &str = "remote";
const DEFAULT_TIER_PERIOD_MS: u64 = 1_000;

impl FileTiering {
    fn settings(self, name: &str) -> Result<TieringSettings, ConfigError> {
        let invalid = |key: &'static str, value: String, reason: &str| ConfigError::Invalid {
            source_name: name.to_string(),
            key,
            value,
            reason: reason.to_string(),
        };
        let instance = self
            .instance
            .unwrap_or_else(|| DEFAULT_TIER_INSTANCE.to_string());
        if crate::partition::tiering::TierKeys::new(&instance).is_err() {
            return Err(invalid(
                "tiering.instance",
                instance,
                "one key segment of [A-Za-z0-9._=-], 1 to 255 bytes",
            ));
        }
        let store = match self.store.as_deref().unwrap_or("local") {
            "local" => {
                TierStore::Local(self.path.unwrap_or_else(|| PathBuf::from(DEFAULT_TIER_DIR)))
            }
            "s3" => {
                let need = |key: &'static str, v: Option<String>| {
                    v.filter(|v| !v.is_empty())
                        .ok_or_else(|| invalid(key, String::new(), "required when store = \"s3\""))
                };
                TierStore::S3 {
                    bucket: need("tiering.bucket", self.bucket)?,
                    region: self.region.unwrap_or_else(|| "us-east-1".to_string()),
                    endpoint: self.endpoint,
                    access_key_id: need("tiering.access_key_id", self.access_key_id)?,
                    secret_access_key: need("tiering.secret_access_key", self.secret_access_key)?,
                    allow_http: self.allow_http.unwrap_or(false),
                }
            }
            other => {
                return Err(invalid(
                    "tiering.store",
                    other.to_string(),
                    "expected \"local\" or \"s3\"",
                ));
            }
        };
        let mut engine = crate::engine::TieringConfig::new(instance);
        if let Some(mib) = self.cache_mib {
            engine.cache_bytes = mib.saturating_mul(1 << 20);
        }
        if let Some(secs) = self.orphan_grace_secs {
            engine.orphan_grace_ms = secs.saturating_mul(1000);
        }
        if let Some(secs) = self.sweep_period_secs {
            engine.sweep_period_ms = secs.saturating_mul(1000);
        }
        for t in self.topics {
            engine.topics.push(crate::engine::TieredTopic {
                stream: t.stream,
                topic: t.topic,
                local: crate::engine::LocalRetention {
                    max_bytes: t.local_retention_bytes.unwrap_or(0),
                    max_age_us: t
                        .local_retention_secs
                        .unwrap_or(0)
                        .saturating_mul(1_000_000),
                },
            });
        }
        let period_ms = self.period_ms.unwrap_or(DEFAULT_TIER_PERIOD_MS);
        if period_ms == 0 || period_ms > MAX_PERIOD_MS {
            return Err(invalid(
                "tiering.period_ms",
                period_ms.to_string(),
                "expected 1 to the reconciler's largest period",
            ));
        }
        Ok(TieringSettings {
            store,
            engine,
            period: Duration::from_millis(period_ms),
        })
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileFiles {
    max_open: Option<u64>,
    append_concurrency: Option<u64>,
    reserve_blocks: Option<bool>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileRetention {
    message_expiry_secs: Option<u64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileHttp {
    address: Option<String>,
    max_body_bytes: Option<u64>,
    max_poll_count: Option<u64>,
    #[serde(default)]
    tls: FileTls,
}

/// `[http.tls]` and `[tcp.tls]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileTls {
    enabled: Option<bool>,
    cert_file: Option<String>,
    key_file: Option<String>,
}

impl FileTls {
    /// The values this table sets, each with its key (`keys`: the full names
    /// of `enabled`, `cert_file` and `key_file`).
    fn values(self, keys: [&'static str; 3]) -> [(&'static str, Option<String>); 3] {
        [
            (keys[0], self.enabled.map(|b| b.to_string())),
            (keys[1], self.cert_file),
            (keys[2], self.key_file),
        ]
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileTcp {
    enabled: Option<bool>,
    address: Option<String>,
    max_frame_bytes: Option<u64>,
    max_connections: Option<u64>,
    idle_timeout_secs: Option<u64>,
    #[serde(default)]
    tls: FileTls,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileReconciler {
    period_ms: Option<u64>,
    concurrency: Option<u64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileAuth {
    token_expiry_secs: Option<u64>,
    failed_login_delay_ms: Option<u64>,
}

/// Values given as command-line flags (the top layer).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FlagOverrides {
    pub data_dir: Option<PathBuf>,
    pub http_address: Option<String>,
    pub tcp_address: Option<String>,
}

/// The environment variables read, with the TOML key each one overrides.
pub(crate) const ENV_KEYS: &[(&str, &str)] = &[
    ("SLUICE_DATA_DIR", "data_dir"),
    ("SLUICE_HTTP_ADDRESS", "http.address"),
    ("SLUICE_HTTP_MAX_BODY_BYTES", "http.max_body_bytes"),
    ("SLUICE_HTTP_MAX_POLL_COUNT", "http.max_poll_count"),
    ("SLUICE_HTTP_TLS_ENABLED", "http.tls.enabled"),
    ("SLUICE_HTTP_TLS_CERT_FILE", "http.tls.cert_file"),
    ("SLUICE_HTTP_TLS_KEY_FILE", "http.tls.key_file"),
    ("SLUICE_TCP_ENABLED", "tcp.enabled"),
    ("SLUICE_TCP_ADDRESS", "tcp.address"),
    ("SLUICE_TCP_MAX_FRAME_BYTES", "tcp.max_frame_bytes"),
    ("SLUICE_TCP_MAX_CONNECTIONS", "tcp.max_connections"),
    ("SLUICE_TCP_IDLE_TIMEOUT_SECS", "tcp.idle_timeout_secs"),
    ("SLUICE_TCP_TLS_ENABLED", "tcp.tls.enabled"),
    ("SLUICE_TCP_TLS_CERT_FILE", "tcp.tls.cert_file"),
    ("SLUICE_TCP_TLS_KEY_FILE", "tcp.tls.key_file"),
    ("SLUICE_RECONCILER_PERIOD_MS", "reconciler.period_ms"),
    ("SLUICE_RECONCILER_CONCURRENCY", "reconciler.concurrency"),
    (
        "SLUICE_RETENTION_MESSAGE_EXPIRY_SECS",
        "retention.message_expiry_secs",
    ),
    ("SLUICE_FILES_MAX_OPEN", "files.max_open"),
    (
        "SLUICE_FILES_APPEND_CONCURRENCY",
        "files.append_concurrency",
    ),
    ("SLUICE_FILES_RESERVE_BLOCKS", "files.reserve_blocks"),
    ("SLUICE_AUTH_TOKEN_EXPIRY_SECS", "auth.token_expiry_secs"),
    (
        "SLUICE_AUTH_FAILED_LOGIN_DELAY_MS",
        "auth.failed_login_delay_ms",
    ),
];

/// One value with the layer it came from, for error messages.
struct Sourced<'a> {
    source_name: &'a str,
    key: &'static str,
    value: String,
}

impl Sourced<'_> {
    fn invalid(&self, reason: impl Into<String>) -> ConfigError {
        ConfigError::Invalid {
            source_name: self.source_name.to_string(),
            key: self.key,
            value: self.value.clone(),
            reason: reason.into(),
        }
    }

    fn address(&self) -> Result<SocketAddr, ConfigError> {
        self.value
            .parse()
            .map_err(|e| self.invalid(format!("expected IP:PORT ({e})")))
    }

    fn boolean(&self) -> Result<bool, ConfigError> {
        match self.value.trim() {
            "true" | "1" => Ok(true),
            "false" | "0" => Ok(false),
            _ => Err(self.invalid("expected true or false")),
        }
    }

    fn path(&self) -> Result<PathBuf, ConfigError> {
        if self.value.is_empty() {
            return Err(self.invalid("must not be empty"));
        }
        Ok(PathBuf::from(&self.value))
    }

    fn number(&self, min: u64, max: u64) -> Result<u64, ConfigError> {
        let n: u64 = self
            .value
            .trim()
            .parse()
            .map_err(|e| self.invalid(format!("expected a whole number ({e})")))?;
        if n < min || n > max {
            return Err(self.invalid(format!("must be between {min} and {max}")));
        }
        Ok(n)
    }
}

/// Limits that keep every value meaningful (and every conversion lossless).
const MAX_BODY_BYTES_LIMIT: u64 = 1 << 30;
const MAX_POLL_COUNT_LIMIT: u64 = 1_000_000;
const MAX_PERIOD_MS: u64 = 24 * 3600 * 1000;
const MAX_TOKEN_EXPIRY_SECS: u64 = 365 * 24 * 3600;
const MAX_LOGIN_DELAY_MS: u64 = 60_000;
const MAX_TCP_CONNECTIONS: u64 = 1_000_000;

impl ServerConfig {
    /// Builds the configuration from the four layers. `config_file` is read
    /// through `storage`; `env` looks up one environment variable (injected so
    /// tests need not touch the process environment).
    pub fn load(
        storage: &dyn DurableStorage,
        config_file: Option<&Path>,
        env: &dyn Fn(&str) -> Option<String>,
        flags: &FlagOverrides,
    ) -> Result<ServerConfig, ConfigError> {
        let mut config = ServerConfig::default();
        if let Some(path) = config_file {
            let bytes = storage.read_file(path).map_err(|e| ConfigError::Read {
                path: path.to_path_buf(),
                reason: e.to_string(),
            })?;
            let text = String::from_utf8(bytes).map_err(|_| ConfigError::Parse {
                path: path.to_path_buf(),
                reason: "not valid UTF-8".into(),
            })?;
            let file: FileConfig = toml::from_str(&text).map_err(|e| ConfigError::Parse {
                path: path.to_path_buf(),
                reason: e.to_string(),
            })?;
            let name = format!("config file {}", path.display());
            config.apply_file(&name, file)?;
        }
        for (var, key) in ENV_KEYS {
            if let Some(value) = env(var) {
                let name = format!("environment variable {var}");
                config.apply(&Sourced {
                    source_name: &name,
                    key,
                    value,
                })?;
            }
        }
        if let Some(dir) = &flags.data_dir {
            config.data_dir = dir.clone();
        }
        if let Some(address) = &flags.http_address {
            config.apply(&Sourced {
                source_name: "flag --http-addr",
                key: "http.address",
                value: address.clone(),
            })?;
        }
        if let Some(address) = &flags.tcp_address {
            config.apply(&Sourced {
                source_name: "flag --tcp-addr",
                key: "tcp.address",
                value: address.clone(),
            })?;
        }
        Ok(config)
    }

    fn apply_file(&mut self, name: &str, file: FileConfig) -> Result<(), ConfigError> {
        if let Some(dir) = file.data_dir {
            self.data_dir = dir;
        }
        if let Some(tiering) = file.tiering {
            self.tiering = Some(tiering.settings(name)?);
        }
        let numbers = [
            ("http.max_body_bytes", file.http.max_body_bytes),
            ("http.max_poll_count", file.http.max_poll_count),
            ("tcp.max_frame_bytes", file.tcp.max_frame_bytes),
            ("tcp.max_connections", file.tcp.max_connections),
            ("tcp.idle_timeout_secs", file.tcp.idle_timeout_secs),
            ("reconciler.period_ms", file.reconciler.period_ms),
            ("reconciler.concurrency", file.reconciler.concurrency),
            (
                "retention.message_expiry_secs",
                file.retention.message_expiry_secs,
            ),
            ("files.max_open", file.files.max_open),
            ("files.append_concurrency", file.files.append_concurrency),
            ("auth.token_expiry_secs", file.auth.token_expiry_secs),
            (
                "auth.failed_login_delay_ms",
                file.auth.failed_login_delay_ms,
            ),
        ];
        if let Some(address) = file.http.address {
            self.apply(&Sourced {
                source_name: name,
                key: "http.address",
                value: address,
            })?;
        }
        if let Some(address) = file.tcp.address {
            self.apply(&Sourced {
                source_name: name,
                key: "tcp.address",
                value: address,
            })?;
        }
        if let Some(enabled) = file.tcp.enabled {
            self.apply(&Sourced {
                source_name: name,
                key: "tcp.enabled",
                value: enabled.to_string(),
            })?;
        }
        if let Some(reserve) = file.files.reserve_blocks {
            self.apply(&Sourced {
                source_name: name,
                key: "files.reserve_blocks",
                value: reserve.to_string(),
            })?;
        }
        let tls = file
            .http
            .tls
            .values([
                "http.tls.enabled",
                "http.tls.cert_file",
                "http.tls.key_file",
            ])
            .into_iter()
            .chain(file.tcp.tls.values([
                "tcp.tls.enabled",
                "tcp.tls.cert_file",
                "tcp.tls.key_file",
            ]));
        for (key, value) in tls {
            if let Some(value) = value {
                self.apply(&Sourced {
                    source_name: name,
                    key,
                    value,
                })?;
            }
        }
        for (key, value) in numbers {
            if let Some(v) = value {
                self.apply(&Sourced {
                    source_name: name,
                    key,
                    value: v.to_string(),
                })?;
            }
        }
        Ok(())
    }

    fn apply(&mut self, v: &Sourced<'_>) -> Result<(), ConfigError> {
        match v.key {
            "data_dir" => self.data_dir = v.path()?,
            "http.address" => self.http.address = v.address()?,
            "http.max_body_bytes" => {
                // Bounded by MAX_BODY_BYTES_LIMIT (1 GiB), so it fits usize.
                self.http.max_body_bytes = usize::try_from(v.number(1024, MAX_BODY_BYTES_LIMIT)?)
                    .map_err(|_| v.invalid("too large for this platform"))?;
            }
            "http.max_poll_count" => {
                self.http.max_poll_count = u32::try_from(v.number(1, MAX_POLL_COUNT_LIMIT)?)
                    .map_err(|_| v.invalid("too large"))?;
            }
            "tcp.enabled" => self.tcp.enabled = v.boolean()?,
            "http.tls.enabled" => self.http.tls.enabled = v.boolean()?,
            "http.tls.cert_file" => self.http.tls.cert_file = v.path()?,
            "http.tls.key_file" => self.http.tls.key_file = v.path()?,
            "tcp.tls.enabled" => self.tcp.tls.enabled = v.boolean()?,
            "tcp.tls.cert_file" => self.tcp.tls.cert_file = v.path()?,
            "tcp.tls.key_file" => self.tcp.tls.key_file = v.path()?,
            "tcp.address" => self.tcp.address = v.address()?,
            "tcp.max_frame_bytes" => {
                // Bounded by MAX_BODY_BYTES_LIMIT (1 GiB), so it fits usize.
                self.tcp.max_frame_bytes = usize::try_from(v.number(4096, MAX_BODY_BYTES_LIMIT)?)
                    .map_err(|_| v.invalid("too large for this platform"))?;
            }
            "tcp.max_connections" => {
                self.tcp.max_connections = usize::try_from(v.number(1, MAX_TCP_CONNECTIONS)?)
                    .map_err(|_| v.invalid("too large for this platform"))?;
            }
            "tcp.idle_timeout_secs" => {
                self.tcp.idle_timeout = Duration::from_secs(v.number(1, MAX_TOKEN_EXPIRY_SECS)?);
            }
            "reconciler.period_ms" => {
                self.reconciler.period = Duration::from_millis(v.number(10, MAX_PERIOD_MS)?);
            }
            "reconciler.concurrency" => {
                // Bounded by MAX_RECONCILER_CONCURRENCY, so it fits usize.
                self.reconciler.concurrency =
                    usize::try_from(v.number(1, MAX_RECONCILER_CONCURRENCY)?)
                        .map_err(|_| v.invalid("too large for this platform"))?;
            }
            "retention.message_expiry_secs" => {
                // 0: never. Bounded so that microseconds fit a u64.
                let secs = v.number(0, MAX_MESSAGE_EXPIRY_SECS)?;
                self.retention.message_expiry = (secs > 0).then(|| Duration::from_secs(secs));
            }
            "files.max_open" => {
                // 0: no pool. Else at least MIN_POOL_BOUND (one call's file
                // and one more); bounded by MAX_OPEN_FILES_LIMIT, so it fits
                // usize.
                let n = v.number(0, MAX_OPEN_FILES_LIMIT)?;
                self.files.max_open = match n {
                    0 => None,
                    n if n < sluice_storage::MIN_POOL_BOUND as u64 => {
                        return Err(v.invalid(format!(
                            "0 (no pool) or at least {}",
                            sluice_storage::MIN_POOL_BOUND
                        )));
                    }
                    n => Some(
                        usize::try_from(n).map_err(|_| v.invalid("too large for this platform"))?,
                    ),
                };
            }
            "files.append_concurrency" => {
                // Bounded by MAX_APPEND_CONCURRENCY, so it fits usize.
                self.files.append_concurrency =
                    usize::try_from(v.number(1, MAX_APPEND_CONCURRENCY)?)
                        .map_err(|_| v.invalid("too large for this platform"))?;
            }
            "files.reserve_blocks" => self.files.reserve_blocks = v.boolean()?,
            "auth.token_expiry_secs" => {
                self.auth.token_expiry = Duration::from_secs(v.number(1, MAX_TOKEN_EXPIRY_SECS)?);
            }
            "auth.failed_login_delay_ms" => {
                self.auth.failed_login_delay =
                    Duration::from_millis(v.number(0, MAX_LOGIN_DELAY_MS)?);
            }
            other => return Err(v.invalid(format!("unknown key {other}"))),
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_storage::{OpenMode, SimStorage};
    use std::collections::BTreeMap;

    fn env_of(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: BTreeMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |k| map.get(k).cloned()
    }

    fn write(storage: &SimStorage, path: &str, text: &str) {
        let f = storage
            .open(Path::new(path), OpenMode::CreateNew)
            .unwrap_or_else(|e| panic!("open {path}: {e}"));
        f.write_at(0, text.as_bytes())
            .unwrap_or_else(|e| panic!("write {path}: {e}"));
    }

    /// The error message of a load that must fail.
    fn load_error(storage: &SimStorage, file: Option<&str>, env: &[(&str, &str)]) -> String {
        ServerConfig::load(
            storage,
            file.map(Path::new),
            &env_of(env),
            &FlagOverrides::default(),
        )
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default()
    }

    #[test]
    fn given_nothing_when_loading_then_the_embedded_defaults_apply() {
        let storage = SimStorage::default();
        let config = ServerConfig::load(&storage, None, &env_of(&[]), &FlagOverrides::default())
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(config, ServerConfig::default());
        assert_eq!(config.data_dir, PathBuf::from("local_data"));
        assert_eq!(config.http.address.to_string(), DEFAULT_HTTP_ADDRESS);
        assert!(config.tcp.enabled);
        assert_eq!(config.tcp.address.to_string(), DEFAULT_TCP_ADDRESS);
    }

    #[test]
    fn given_tcp_settings_in_every_layer_when_loading_then_each_applies() {
        let storage = SimStorage::default();
        write(
            &storage,
            "/tcp.toml",
            "[tcp]\nenabled = false\naddress = \"127.0.0.1:9000\"\nmax_connections = 3\n",
        );
        let env = env_of(&[("SLUICE_TCP_IDLE_TIMEOUT_SECS", "7")]);
        let flags = FlagOverrides {
            tcp_address: Some("127.0.0.1:9001".into()),
            ..FlagOverrides::default()
        };
        let config = ServerConfig::load(&storage, Some(Path::new("/tcp.toml")), &env, &flags)
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(!config.tcp.enabled);
        assert_eq!(config.tcp.max_connections, 3);
        assert_eq!(config.tcp.idle_timeout, Duration::from_secs(7));
        assert_eq!(config.tcp.address.to_string(), "127.0.0.1:9001");
        let bad = ServerConfig::load(
            &storage,
            None,
            &env_of(&[("SLUICE_TCP_ENABLED", "maybe")]),
            &FlagOverrides::default(),
        );
        assert!(bad.is_err());
    }

    #[test]
    fn given_tls_tables_and_env_when_loading_then_each_applies_and_tls_is_off_by_default() {
        let defaults = ServerConfig::default();
        assert!(!defaults.tcp.tls.enabled && !defaults.http.tls.enabled);
        let storage = SimStorage::default();
        write(
            &storage,
            "/tls.toml",
            "[http.tls]\nenabled = true\ncert_file = \"c.pem\"\nkey_file = \"k.pem\"\n\
             [tcp.tls]\nenabled = true\ncert_file = \"tc.pem\"\nkey_file = \"tk.pem\"\n",
        );
        let env = env_of(&[
            ("SLUICE_TCP_TLS_ENABLED", "false"),
            ("SLUICE_HTTP_TLS_KEY_FILE", "/etc/sluice/key.pem"),
        ]);
        let config = ServerConfig::load(
            &storage,
            Some(Path::new("/tls.toml")),
            &env,
            &FlagOverrides::default(),
        )
        .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            config.http.tls,
            TlsSettings {
                enabled: true,
                cert_file: PathBuf::from("c.pem"),
                key_file: PathBuf::from("/etc/sluice/key.pem"),
            }
        );
        assert!(!config.tcp.tls.enabled);
        assert_eq!(config.tcp.tls.cert_file, PathBuf::from("tc.pem"));
        for (var, value) in [
            ("SLUICE_HTTP_TLS_ENABLED", "yes"),
            ("SLUICE_TCP_TLS_CERT_FILE", ""),
        ] {
            let err = load_error(&storage, None, &[(var, value)]);
            assert!(err.contains(var), "{err}");
        }
        write(&storage, "/typo.toml", "[tcp.tls]\ncert = \"c.pem\"\n");
        let err = load_error(&storage, Some("/typo.toml"), &[]);
        assert!(err.contains("cert"), "{err}");
    }

    #[test]
    fn given_file_env_and_flags_when_loading_then_each_layer_overrides_the_one_below() {
        let storage = SimStorage::default();
        write(
            &storage,
            "/sluice.toml",
            "data_dir = \"from-file\"\n[http]\naddress = \"127.0.0.1:4000\"\nmax_body_bytes = 4096\n[reconciler]\nperiod_ms = 250\n",
        );
        let env = env_of(&[
            ("SLUICE_HTTP_ADDRESS", "127.0.0.1:5000"),
            ("SLUICE_RECONCILER_PERIOD_MS", "100"),
        ]);
        let flags = FlagOverrides {
            data_dir: None,
            http_address: Some("127.0.0.1:6000".into()),
            tcp_address: None,
        };
        let config = ServerConfig::load(&storage, Some(Path::new("/sluice.toml")), &env, &flags)
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(config.data_dir, PathBuf::from("from-file"));
        assert_eq!(config.http.max_body_bytes, 4096);
        assert_eq!(config.reconciler.period, Duration::from_millis(100));
        assert_eq!(config.http.address.to_string(), "127.0.0.1:6000");
    }

    #[test]
    fn given_an_unknown_file_key_when_loading_then_the_error_names_it() {
        let storage = SimStorage::default();
        write(&storage, "/bad.toml", "[http]\nadress = \"127.0.0.1:1\"\n");
        let err = load_error(&storage, Some("/bad.toml"), &[]);
        assert!(err.contains("adress"), "{err}");
    }

    #[test]
    fn given_a_malformed_env_value_when_loading_then_the_error_names_the_variable() {
        let storage = SimStorage::default();
        let err = load_error(&storage, None, &[("SLUICE_HTTP_MAX_BODY_BYTES", "lots")]);
        assert!(err.contains("SLUICE_HTTP_MAX_BODY_BYTES"), "{err}");
    }

    #[test]
    fn given_a_missing_config_file_when_loading_then_it_is_an_error() {
        let storage = SimStorage::default();
        let result = ServerConfig::load(
            &storage,
            Some(Path::new("/nope.toml")),
            &env_of(&[]),
            &FlagOverrides::default(),
        );
        assert!(matches!(result, Err(ConfigError::Read { .. })));
    }

    #[test]
    fn given_a_retention_default_when_layered_then_env_overrides_file_and_zero_means_never() {
        let sim = SimStorage::default();
        write(
            &sim,
            "/sluice.toml",
            "[retention]\nmessage_expiry_secs = 60\n",
        );
        let path = Path::new("/sluice.toml");
        let from_file =
            ServerConfig::load(&sim, Some(path), &env_of(&[]), &FlagOverrides::default()).unwrap();
        assert_eq!(
            from_file.retention.message_expiry,
            Some(Duration::from_secs(60))
        );
        let from_env = ServerConfig::load(
            &sim,
            Some(path),
            &env_of(&[("SLUICE_RETENTION_MESSAGE_EXPIRY_SECS", "0")]),
            &FlagOverrides::default(),
        )
        .unwrap();
        assert_eq!(from_env.retention.message_expiry, None);
        assert_eq!(ServerConfig::default().retention.message_expiry, None);
    }

    #[test]
    fn given_an_append_concurrency_when_layered_then_env_overrides_file_and_0_is_refused() {
        let sim = SimStorage::default();
        write(&sim, "/sluice.toml", "[files]\nappend_concurrency = 2\n");
        let path = Path::new("/sluice.toml");
        let load = |env: &[(&str, &str)]| {
            ServerConfig::load(&sim, Some(path), &env_of(env), &FlagOverrides::default())
        };
        assert_eq!(load(&[]).unwrap().files.append_concurrency, 2);
        let from_env = load(&[("SLUICE_FILES_APPEND_CONCURRENCY", "1")]).unwrap();
        assert_eq!(from_env.files.append_concurrency, 1);
        assert_eq!(
            ServerConfig::default().files.append_concurrency,
            crate::engine::DEFAULT_APPEND_CONCURRENCY
        );
        let zero = load(&[("SLUICE_FILES_APPEND_CONCURRENCY", "0")]).unwrap_err();
        assert!(zero.to_string().contains("append_concurrency"), "{zero}");
    }

    #[test]
    fn given_block_reservations_off_in_the_file_when_layered_then_env_overrides_it_and_a_non_boolean_is_refused()
     {
        let sim = SimStorage::default();
        write(&sim, "/sluice.toml", "[files]\nreserve_blocks = false\n");
        let path = Path::new("/sluice.toml");
        let load = |env: &[(&str, &str)]| {
            ServerConfig::load(&sim, Some(path), &env_of(env), &FlagOverrides::default())
        };
        assert!(
            ServerConfig::default().files.reserve_blocks,
            "on by default"
        );
        assert!(!load(&[]).unwrap().files.reserve_blocks);
        let from_env = load(&[("SLUICE_FILES_RESERVE_BLOCKS", "true")]).unwrap();
        assert!(from_env.files.reserve_blocks);
        let bad = load(&[("SLUICE_FILES_RESERVE_BLOCKS", "sometimes")]).unwrap_err();
        assert!(bad.to_string().contains("reserve_blocks"), "{bad}");
    }

    #[test]
    fn given_a_file_bound_when_layered_then_env_overrides_file_and_too_small_is_refused() {
        let sim = SimStorage::default();
        write(&sim, "/sluice.toml", "[files]\nmax_open = 64\n");
        let path = Path::new("/sluice.toml");
        let from_file =
            ServerConfig::load(&sim, Some(path), &env_of(&[]), &FlagOverrides::default()).unwrap();
        assert_eq!(from_file.files.max_open, Some(64));
        let from_env = ServerConfig::load(
            &sim,
            Some(path),
            &env_of(&[("SLUICE_FILES_MAX_OPEN", "100")]),
            &FlagOverrides::default(),
        )
        .unwrap();
        assert_eq!(from_env.files.max_open, Some(100));
        assert_eq!(ServerConfig::default().files.max_open, None);
        let off = ServerConfig::load(
            &sim,
            Some(path),
            &env_of(&[("SLUICE_FILES_MAX_OPEN", "0")]),
            &FlagOverrides::default(),
        )
        .unwrap();
        assert_eq!(off.files.max_open, None);
        let too_small = ServerConfig::load(
            &sim,
            None,
            &env_of(&[("SLUICE_FILES_MAX_OPEN", "1")]),
            &FlagOverrides::default(),
        );
        assert!(matches!(too_small, Err(ConfigError::Invalid { .. })));
    }
}
