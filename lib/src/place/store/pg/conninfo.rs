//! A `postgres://` URL as libpq reads it: the parameters tokio-postgres
//! does not know (`sslmode=verify-ca|verify-full`, `sslrootcert`), the
//! password from `PGPASSWORD` or the password file, and the TLS setup
//! each `sslmode` asks for.
//!
//! **No downgrade.** A network between the host and the store is not
//! trusted: a proxy that answers "no TLS" and asks for a cleartext password
//! would get it, and one that rewrites the database name would hand the
//! lock to two hosts at once. So a TCP host's default is `verify-full`
//! (TLS, the certificate's chain and name checked), libpq's `prefer` and
//! `allow` (TLS only if the peer offers it, nothing checked) are refused
//! with the fix named, and only an explicit `sslmode=disable` talks
//! without TLS. A Unix socket needs no TLS: `sslmode` is ignored for it,
//! as libpq does; who listens on it is checked instead (`requirepeer`, and
//! the socket's directory: see `socket.rs`).
//!
//! **No password in messages.** The URL shown anywhere is
//! [`ConnInfo::display`], rebuilt from the parsed parts without the
//! password; a URL that cannot be parsed is shown through [`redact`].

use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, SignatureScheme};
use tokio_postgres::config::{Host, SslMode};

/// How the server's certificate is checked (libpq's `sslmode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tls {
    /// No TLS: `sslmode=disable`, or every host a Unix socket.
    Off,
    /// TLS always, certificate not checked (`require`): it keeps out a
    /// passive listener, not a proxy that presents its own certificate.
    Require,
    /// TLS, the certificate's chain checked, not its name (`verify-ca`).
    VerifyCa,
    /// TLS, the chain and the host name checked (`verify-full`, the
    /// default).
    VerifyFull,
}

impl Tls {
    /// The `sslmode` that names it.
    pub fn name(self) -> &'static str {
        match self {
            Tls::Off => "disable",
            Tls::Require => "require",
            Tls::VerifyCa => "verify-ca",
            Tls::VerifyFull => "verify-full",
        }
    }
}

/// A parsed store URL, ready to connect.
#[derive(Clone)]
pub struct ConnInfo {
    /// What tokio-postgres connects with (password filled in).
    pub config: tokio_postgres::Config,
    /// The TLS policy.
    pub tls: Tls,
    /// `sslrootcert`: the CA file for `verify-ca`/`verify-full` (else
    /// the system's roots).
    pub root_cert: Option<PathBuf>,
    /// `requirepeer` (or `PGREQUIREPEER`): the user a Unix socket's
    /// server must run as (see `socket.rs`).
    pub require_peer: Option<String>,
    /// The URL without its password, for messages.
    pub display: String,
}

impl std::fmt::Debug for ConnInfo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConnInfo")
            .field("url", &self.display)
            .field("tls", &self.tls)
            .finish()
    }
}

/// The parts of a URL that onlyone reads itself (the rest goes to
/// tokio-postgres).
#[derive(Default)]
struct Own {
    user: Option<String>,
    password: Option<Vec<u8>>,
    sslmode: Option<String>,
    /// Where `sslmode` came from, for messages: `sslmode` (the URL) or
    /// `PGSSLMODE`.
    sslmode_from: &'static str,
    root_cert: Option<PathBuf>,
    require_peer: Option<String>,
}

/// `PGPORT`: a port, or a list of them separated by commas (one per
/// host); none when it is not set.
fn env_ports(env: &dyn Fn(&str) -> Option<String>) -> Result<Vec<u16>, String> {
    let Some(ports) = env("PGPORT") else {
        return Ok(Vec::new());
    };
    ports
        .split(',')
        .map(|p| {
            p.trim()
                .parse::<u16>()
                .ok()
                .filter(|&p| p > 0)
                .ok_or_else(|| {
                    format!(
                        "PGPORT `{}` is not a port (a number from 1 to 65535, or a list of them \
                     separated by commas)",
                        p.escape_debug()
                    )
                })
        })
        .collect()
}

/// The URL's hosts-and-path part with `PGPORT` given to its hosts, when
/// it names hosts and no port (tokio-postgres would take 5432 for each).
fn ports_from_env(
    base: &str,
    query: &[&str],
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<String, String> {
    let (hosts, path) = base.split_at(base.find('/').unwrap_or(base.len()));
    let has_port = |chunk: &str| match chunk.strip_prefix('[') {
        Some(v6) => v6.split_once(']').is_some_and(|(_, rest)| !rest.is_empty()),
        None => chunk.contains(':'),
    };
    let port_in_query = query
        .iter()
        .any(|p| percent_decode(p.split_once('=').map_or(p, |kv| kv.0)) == b"port");
    if hosts.is_empty() || port_in_query || hosts.split(',').any(has_port) {
        return Ok(base.to_owned());
    }
    let ports = env_ports(env)?;
    let Some(&first) = ports.first() else {
        return Ok(base.to_owned());
    };
    let with: Vec<String> = hosts
        .split(',')
        .enumerate()
        .map(|(i, h)| format!("{h}:{}", ports.get(i).copied().unwrap_or(first)))
        .collect();
    Ok(format!("{}{path}", with.join(",")))
}

/// Fills in what the URL left out from libpq's variables (see
/// [`ConnInfo::parse`]).
fn from_env(
    config: &mut tokio_postgres::Config,
    own: &mut Own,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<(), String> {
    if config.get_hosts().is_empty()
        && let Some(hosts) = env("PGHOST")
    {
        for h in hosts.split(',') {
            if h.starts_with('/') {
                config.host_path(h);
            } else if !h.is_empty() {
                config.host(h);
            }
        }
    }
    if config.get_ports().is_empty() {
        for port in env_ports(env)? {
            config.port(port);
        }
    }
    if own.user.is_none() {
        own.user = env("PGUSER");
    }
    if config.get_dbname().is_none()
        && let Some(db) = env("PGDATABASE")
    {
        config.dbname(db);
    }
    if own.sslmode.is_none() {
        own.sslmode = env("PGSSLMODE");
        own.sslmode_from = "PGSSLMODE";
    }
    if own.root_cert.is_none() {
        own.root_cert = env("PGSSLROOTCERT").map(PathBuf::from);
    }
    if own.require_peer.is_none() {
        own.require_peer = env("PGREQUIREPEER");
    }
    Ok(())
}

impl ConnInfo {
    /// Parses `url`, taking the password from it (`user:PASSWORD@` or
    /// `?password=`), else `PGPASSWORD`, else the password file
    /// (`PGPASSFILE`, else `~/.pgpass`). What the URL leaves out is read
    /// from the environment as libpq reads it: `PGHOST` (a path is a
    /// socket directory), `PGPORT`, `PGUSER`, `PGDATABASE`, `PGSSLMODE`
    /// (refused like the URL's when it would allow a downgrade),
    /// `PGSSLROOTCERT` and `PGREQUIREPEER`.
    pub fn parse(url: &str) -> Result<ConnInfo, String> {
        ConnInfo::parse_with(url, &|k| std::env::var(k).ok().filter(|v| !v.is_empty()))
    }

    /// [`ConnInfo::parse`] with the environment `env` gives (a variable
    /// set and not empty).
    pub fn parse_with(url: &str, env: &dyn Fn(&str) -> Option<String>) -> Result<ConnInfo, String> {
        let Some(rest) = url
            .strip_prefix("postgres://")
            .or_else(|| url.strip_prefix("postgresql://"))
        else {
            return Err(
                "the store is not a postgres:// URL: use postgres://USER@HOST[:PORT]/DATABASE"
                    .into(),
            );
        };
        let (userinfo, after) = split_userinfo(rest);
        let (base, query) = after.split_once('?').unwrap_or((after, ""));
        let mut own = Own {
            sslmode_from: "sslmode",
            ..Own::default()
        };
        if let Some(info) = userinfo {
            let (user, pw) = match info.split_once(':') {
                Some((u, p)) => (u, Some(p)),
                None => (info, None),
            };
            if !user.is_empty() {
                own.user = Some(String::from_utf8_lossy(&percent_decode(user)).into_owned());
            }
            own.password = pw.map(percent_decode);
        }
        let mut kept: Vec<&str> = Vec::new();
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            let v = || String::from_utf8_lossy(&percent_decode(v)).into_owned();
            match &*percent_decode(k) {
                b"sslmode" => own.sslmode = Some(v()),
                b"sslrootcert" => own.root_cert = Some(PathBuf::from(v())),
                b"requirepeer" => own.require_peer = Some(v()).filter(|u| !u.is_empty()),
                b"password" => {
                    own.password = Some(percent_decode(pair.split_once('=').map_or("", |p| p.1)))
                }
                b"user" => own.user = Some(v()),
                _ => kept.push(pair),
            }
        }
        // tokio-postgres takes the first `@` anywhere (one in the query,
        // too) as the end of a user part: the query's are escaped.
        let base = ports_from_env(base, &kept, env)?;
        let rebuilt = if kept.is_empty() {
            format!("postgres://{base}")
        } else {
            format!("postgres://{base}?{}", kept.join("&").replace('@', "%40"))
        };
        let mut config = tokio_postgres::Config::from_str(&rebuilt)
            .map_err(|e| format!("cannot read the store URL `{}`: {e}", redact(url)))?;
        from_env(&mut config, &mut own, env)?;
        let local = !config.get_hosts().is_empty()
            && config
                .get_hosts()
                .iter()
                .all(|h| !matches!(h, Host::Tcp(_)));
        let tls = tls_policy(own.sslmode.as_deref(), own.sslmode_from, local)?;
        config.ssl_mode(match tls {
            Tls::Off => SslMode::Disable,
            _ => SslMode::Require,
        });
        match own.user {
            Some(u) => {
                config.user(u);
            }
            // libpq's default user is the operating system's.
            None => {
                if let Some(user) = default_user(rustix::process::geteuid().as_raw())? {
                    config.user(user);
                }
            }
        }
        match own.password {
            Some(pw) => {
                config.password(pw);
            }
            None => {
                if let Some(pw) = password_from_env(&config, env) {
                    config.password(pw);
                }
            }
        }
        config.application_name("onlyone");
        let display = display(&config, tls, local);
        Ok(ConnInfo {
            config,
            tls,
            root_cert: own.root_cert,
            require_peer: own.require_peer,
            display,
        })
    }

    /// The rustls configuration for this policy (`None`: no TLS).
    pub fn rustls(&self) -> Result<Option<rustls::ClientConfig>, String> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = rustls::ClientConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .map_err(|e| e.to_string())?;
        let config = match self.tls {
            Tls::Off => return Ok(None),
            Tls::Require => builder
                .dangerous()
                .with_custom_certificate_verifier(Arc::new(Unchecked(provider)))
                .with_no_client_auth(),
            Tls::VerifyCa | Tls::VerifyFull => {
                let roots = self.roots()?;
                let chain = rustls::client::WebPkiServerVerifier::builder_with_provider(
                    Arc::new(roots),
                    provider.clone(),
                )
                .build()
                .map_err(|e| format!("cannot check the server's certificate: {e}"))?;
                if self.tls == Tls::VerifyFull {
                    builder.with_webpki_verifier(chain).with_no_client_auth()
                } else {
                    builder
                        .dangerous()
                        .with_custom_certificate_verifier(Arc::new(ChainOnly(chain)))
                        .with_no_client_auth()
                }
            }
        };
        Ok(Some(config))
    }

    /// The certificate authorities: `sslrootcert`, else the system's.
    fn roots(&self) -> Result<rustls::RootCertStore, String> {
        use rustls::pki_types::pem::PemObject;
        let mut roots = rustls::RootCertStore::empty();
        match &self.root_cert {
            Some(path) => {
                let certs = CertificateDer::pem_file_iter(path)
                    .map_err(|e| format!("cannot read sslrootcert `{}`: {e}", path.display()))?;
                for c in certs {
                    let c = c.map_err(|e| {
                        format!("cannot read sslrootcert `{}`: {e}", path.display())
                    })?;
                    roots.add(c).map_err(|e| {
                        format!("a certificate in `{}` is not usable: {e}", path.display())
                    })?;
                }
            }
            None => {
                let found = rustls_native_certs::load_native_certs();
                for c in found.certs {
                    let _ = roots.add(c);
                }
            }
        }
        if roots.is_empty() {
            return Err(
                "no certificate authority to check the server with: give sslrootcert=FILE".into(),
            );
        }
        Ok(roots)
    }
}

/// The TLS policy for `sslmode` (`None`: not in the URL); `local`: every
/// host is a Unix socket, where TLS is not used whatever `sslmode` says.
fn tls_policy(sslmode: Option<&str>, from: &str, local: bool) -> Result<Tls, String> {
    let tls = match sslmode {
        None => Tls::VerifyFull,
        Some("disable") => Tls::Off,
        Some(weak @ ("allow" | "prefer")) => {
            return Err(format!(
                "{from}={weak} is refused: anyone on the network between this host and the \
                 store can turn its TLS off and read the password, or answer for another \
                 database; use sslmode=verify-full (the default: TLS, the server's certificate \
                 checked; sslrootcert=PATH for a private CA), or sslmode=disable to connect \
                 without TLS knowingly"
            ));
        }
        Some("require") => Tls::Require,
        Some("verify-ca") => Tls::VerifyCa,
        Some("verify-full") => Tls::VerifyFull,
        Some(other) => {
            return Err(format!(
                "{from} `{}` is not one of disable, require, verify-ca, verify-full",
                other.escape_debug()
            ));
        }
    };
    Ok(if local { Tls::Off } else { tls })
}

/// The URL as messages show it: rebuilt from what was parsed, so that no
/// form of password (in the user part, `?password=`, escaped or not) can
/// appear.
fn display(config: &tokio_postgres::Config, tls: Tls, local: bool) -> String {
    let user = config.get_user().unwrap_or_default();
    let ports = config.get_ports();
    let hosts: Vec<String> = config
        .get_hosts()
        .iter()
        .enumerate()
        .map(|(i, h)| {
            let port = ports.get(i).or(ports.first()).copied().unwrap_or(5432);
            match h {
                Host::Tcp(h) if h.contains(':') => format!("[{h}]:{port}"),
                Host::Tcp(h) => format!("{h}:{port}"),
                Host::Unix(p) => format!("{}:{port}", p.display().to_string().replace('/', "%2F")),
            }
        })
        .collect();
    let db = config.get_dbname().unwrap_or(user);
    let mut out = format!("postgres://{user}@{}/{db}", hosts.join(","));
    if !local {
        out.push_str("?sslmode=");
        out.push_str(tls.name());
    }
    out.chars().filter(|c| !c.is_control()).collect()
}

/// Splits what follows `postgres://` into the user part (before the `@`
/// that ends it) and the rest. A password may hold `@`, `/`, `:` or `?`
/// unescaped: the user part ends at the last `@` before the first `?`
/// after the first `@`; when that reads as a query (`h/db?password=a@b`),
/// at the last `@` before the first `?`.
fn split_userinfo(rest: &str) -> (Option<&str>, &str) {
    let Some(first) = rest.find('@') else {
        return (None, rest);
    };
    let q = rest[first..].find('?').map_or(rest.len(), |i| first + i);
    let last = rest[..q].rfind('@').unwrap_or(first);
    let info = &rest[..last];
    if info
        .split_once('?')
        .is_some_and(|(_, after)| after.contains('='))
    {
        let q = rest.find('?').unwrap_or(rest.len());
        return match rest[..q].rfind('@') {
            Some(i) => (Some(&rest[..i]), &rest[i + 1..]),
            None => (None, rest),
        };
    }
    (Some(info), &rest[last + 1..])
}

/// The store's user when neither the URL nor `PGUSER` names one: this
/// user's name, as libpq takes it, from `/etc/passwd` (onlyone's own
/// reader). A uid with no name there (an LDAP or SSSD account) is left to
/// the driver, which asks the C library's user database (NSS), except in a
/// static glibc build, which cannot safely load NSS's modules (it crashed
/// in them): there it is a clear error.
fn default_user(uid: u32) -> Result<Option<String>, String> {
    match crate::sys::user_name(uid) {
        Some(name) => Ok(Some(name)),
        None if cfg!(all(target_env = "gnu", target_feature = "crt-static")) => Err(format!(
            "no user for the store: uid {uid} has no name in /etc/passwd (and this static \
             build does not ask NSS); name one in the URL (postgres://USER@HOST/DB) or in PGUSER"
        )),
        None => Ok(None),
    }
}

/// A URL with every password in it replaced by `***` (the user part's, and
/// `password=` in the query), for a URL that could not be parsed.
pub fn redact(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return "(not a URL)".into();
    };
    let (info, after) = split_userinfo(rest);
    let mut out = format!("{scheme}://");
    if let Some(info) = info {
        match info.split_once(':') {
            Some((user, _)) => out.push_str(&format!("{user}:***@")),
            None => out.push_str(&format!("{info}@")),
        }
    }
    let (base, query) = match after.split_once('?') {
        Some((b, q)) => (b, Some(q)),
        None => (after, None),
    };
    out.push_str(base);
    if let Some(query) = query {
        let pairs: Vec<String> = query
            .split('&')
            .map(|pair| match pair.split_once('=') {
                Some((k, _)) if percent_decode(k).eq_ignore_ascii_case(b"password") => {
                    format!("{k}=***")
                }
                _ => pair.to_owned(),
            })
            .collect();
        out.push('?');
        out.push_str(&pairs.join("&"));
    }
    out.chars().filter(|c| !c.is_control()).collect()
}

/// `%XX` escapes decoded.
fn percent_decode(s: &str) -> Vec<u8> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%'
            && let Some(v) = s
                .get(i + 1..i + 3)
                .and_then(|h| u8::from_str_radix(h, 16).ok())
        {
            out.push(v);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    out
}

/// `PGPASSWORD`, else the password file's entry for this connection.
fn password_from_env(
    config: &tokio_postgres::Config,
    env: &dyn Fn(&str) -> Option<String>,
) -> Option<String> {
    if let Some(pw) = env("PGPASSWORD") {
        return Some(pw);
    }
    let file = match env("PGPASSFILE") {
        Some(f) => PathBuf::from(f),
        None => PathBuf::from(env("HOME")?).join(".pgpass"),
    };
    let host = match config.get_hosts().first() {
        Some(Host::Tcp(h)) => h.clone(),
        // A socket directory matches `localhost`, as libpq does.
        _ => "localhost".to_owned(),
    };
    let port = config
        .get_ports()
        .first()
        .copied()
        .unwrap_or(5432)
        .to_string();
    let user = config.get_user().unwrap_or_default();
    let db = config.get_dbname().unwrap_or(user);
    pgpass_lookup(&file, &host, &port, db, user)
}

/// The password of the first line of a libpq password file that matches
/// (`host:port:database:user:password`, `*` matches anything, `\:` and
/// `\\` escape). A file that others may read is ignored, as libpq does.
pub fn pgpass_lookup(file: &Path, host: &str, port: &str, db: &str, user: &str) -> Option<String> {
    use std::os::unix::fs::PermissionsExt;
    let meta = std::fs::metadata(file).ok()?;
    if meta.permissions().mode() & 0o077 != 0 || !meta.is_file() {
        return None;
    }
    let text = std::fs::read_to_string(file).ok()?;
    for line in text.lines() {
        if line.starts_with('#') || line.trim().is_empty() {
            continue;
        }
        let fields = split_pgpass(line);
        if fields.len() < 5 {
            continue;
        }
        let want = [host, port, db, user];
        if fields[..4]
            .iter()
            .zip(want)
            .all(|(f, w)| f == "*" || f == w)
        {
            return Some(fields[4].clone());
        }
    }
    None
}

/// Splits a password-file line on unescaped `:` (the password, last, may
/// hold more).
fn split_pgpass(line: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut field = String::new();
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => field.extend(chars.next()),
            ':' if out.len() < 4 => out.push(std::mem::take(&mut field)),
            c => field.push(c),
        }
    }
    out.push(field);
    out
}

/// `require`: TLS without checking the certificate (libpq's
/// meaning), handshake signatures still checked.
#[derive(Debug)]
struct Unchecked(Arc<rustls::crypto::CryptoProvider>);

impl ServerCertVerifier for Unchecked {
    fn verify_server_cert(
        &self,
        _: &CertificateDer<'_>,
        _: &[CertificateDer<'_>],
        _: &ServerName<'_>,
        _: &[u8],
        _: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// `verify-ca`: the chain checked, whatever name the certificate bears.
#[derive(Debug)]
struct ChainOnly(Arc<rustls::client::WebPkiServerVerifier>);

impl ServerCertVerifier for ChainOnly {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        match self
            .0
            .verify_server_cert(end_entity, intermediates, server_name, ocsp, now)
        {
            Err(rustls::Error::InvalidCertificate(rustls::CertificateError::NotValidForName))
            | Err(rustls::Error::InvalidCertificate(
                rustls::CertificateError::NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_verify_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_uid_without_a_name_is_left_to_nss_or_refused_when_static() {
        assert_eq!(default_user(0), Ok(Some("root".to_owned())));
        match default_user(4_242_424) {
            // A static glibc build never asks NSS.
            Err(e) => assert!(
                e.contains("uid 4242424 has no name") && e.contains("PGUSER"),
                "{e}"
            ),
            // Else the driver asks NSS.
            Ok(user) => assert_eq!(user, None),
        }
    }

    /// Every form a password can take in a URL: none shows in the URL as
    /// messages give it, and each is the password that is sent.
    #[test]
    fn passwords_never_show_in_messages() {
        let forms = [
            ("postgres://u:S3cret@h:5/db?sslmode=require", "S3cret"),
            ("postgres://u:S3c/ret@h:5/db", "S3c/ret"),
            ("postgres://u:S3c@ret@h:5/db", "S3c@ret"),
            ("postgres://u:S3c:r?et@h:5/db", "S3c:r?et"),
            ("postgres://u:S3c%2Fr%40e%3At@h:5/db", "S3c/r@e:t"),
            ("postgres://u@h:5/db?password=S3cret", "S3cret"),
            (
                "postgres://u@h:5/db?sslmode=disable&password=S3c%2F%40ret",
                "S3c/@ret",
            ),
            ("postgres://u@h:5/db?pass%77ord=S3c@ret", "S3c@ret"),
            (
                "postgres://u@h:5/db?sslmode=disable&password=S3c/r@et",
                "S3c/r@et",
            ),
        ];
        for (url, pw) in forms {
            let c = ConnInfo::parse(url).unwrap();
            assert_eq!(c.config.get_password(), Some(pw.as_bytes()), "{url}");
            assert_eq!(c.config.get_user(), Some("u"), "{url}");
            assert_eq!(c.config.get_hosts(), &[Host::Tcp("h".into())], "{url}");
            for shown in [c.display.clone(), redact(url)] {
                for part in ["S3c", "ret", "%2F", "%40"] {
                    assert!(!shown.contains(part), "{url} shown as {shown}");
                }
            }
        }
        assert_eq!(
            redact("postgres://u:secret@h:5/db?sslmode=require"),
            "postgres://u:***@h:5/db?sslmode=require"
        );
        assert_eq!(
            ConnInfo::parse("postgres://u:secret@h:5/db?connect_timeout=3")
                .unwrap()
                .display,
            "postgres://u@h:5/db?sslmode=verify-full"
        );
        assert_eq!(redact("postgres://u@h/db"), "postgres://u@h/db");
        assert!(!redact("host=h password=secret").contains("secret"));
        // `@` in the query is not a user part.
        let c = ConnInfo::parse("postgres://h/db?application_name=a@b").unwrap();
        assert_eq!(c.config.get_hosts(), &[Host::Tcp("h".into())]);
    }

    /// A TCP host gets `verify-full` unless the URL says otherwise;
    /// `prefer` and `allow` are refused, naming the fix; a Unix socket uses
    /// no TLS.
    #[test]
    fn the_default_cannot_be_downgraded() {
        assert_eq!(
            ConnInfo::parse("postgres://u@h/db").unwrap().tls,
            Tls::VerifyFull
        );
        for weak in ["prefer", "allow"] {
            let e = ConnInfo::parse(&format!("postgres://u@h/db?sslmode={weak}")).unwrap_err();
            assert!(
                e.contains("sslmode=verify-full") && e.contains("sslmode=disable"),
                "{e}"
            );
        }
        let off = ConnInfo::parse("postgres://u@h/db?sslmode=disable").unwrap();
        assert_eq!(
            (off.tls, off.config.get_ssl_mode()),
            (Tls::Off, SslMode::Disable)
        );
        let req = ConnInfo::parse("postgres://u@h/db?sslmode=require").unwrap();
        assert_eq!(
            (req.tls, req.config.get_ssl_mode()),
            (Tls::Require, SslMode::Require)
        );
        let sock = ConnInfo::parse("postgres://u@%2Frun%2Fpostgresql/db").unwrap();
        assert_eq!(
            (sock.tls, sock.config.get_ssl_mode()),
            (Tls::Off, SslMode::Disable)
        );
        assert_eq!(sock.display, "postgres://u@%2Frun%2Fpostgresql:5432/db");
    }

    /// libpq's variables fill in what the URL leaves out, never what it
    /// says; `PGSSLMODE=prefer` is refused like the URL's, naming it.
    #[test]
    fn libpq_variables_fill_in_what_the_url_leaves_out() {
        let vars = |pairs: &'static [(&'static str, &'static str)]| {
            move |k: &str| {
                pairs
                    .iter()
                    .find(|(n, _)| *n == k)
                    .map(|(_, v)| (*v).to_owned())
            }
        };
        let env = vars(&[
            ("PGHOST", "db.example,/run/pg"),
            ("PGPORT", "6432,6433"),
            ("PGUSER", "jobs"),
            ("PGDATABASE", "locks"),
            ("PGSSLMODE", "require"),
            ("PGSSLROOTCERT", "/etc/ca.pem"),
            ("PGPASSWORD", "pw"),
        ]);
        let c = ConnInfo::parse_with("postgres://", &env).unwrap();
        assert_eq!(
            c.config.get_hosts(),
            &[
                Host::Tcp("db.example".into()),
                Host::Unix(PathBuf::from("/run/pg"))
            ]
        );
        assert_eq!(c.config.get_ports(), &[6432, 6433]);
        assert_eq!(c.config.get_user(), Some("jobs"));
        assert_eq!(c.config.get_dbname(), Some("locks"));
        assert_eq!(c.config.get_password(), Some(&b"pw"[..]));
        assert_eq!(c.tls, Tls::Require);
        assert_eq!(c.root_cert, Some(PathBuf::from("/etc/ca.pem")));
        // The URL's own parts win.
        let c = ConnInfo::parse_with("postgres://u@h:5/db?sslmode=disable", &env).unwrap();
        assert_eq!(c.config.get_hosts(), &[Host::Tcp("h".into())]);
        assert_eq!(c.config.get_ports(), &[5]);
        assert_eq!(c.config.get_user(), Some("u"));
        assert_eq!(c.config.get_dbname(), Some("db"));
        assert_eq!(c.tls, Tls::Off);
        // A host without a port gets PGPORT's.
        let c = ConnInfo::parse_with("postgres://u@h/db", &env).unwrap();
        assert_eq!(c.config.get_ports(), &[6432]);
        let c = ConnInfo::parse_with("postgres://u@h,[::1]/db", &env).unwrap();
        assert_eq!(c.config.get_ports(), &[6432, 6433]);
        // A socket directory in PGHOST needs no TLS.
        let sock = ConnInfo::parse_with("postgres://", &vars(&[("PGHOST", "/run/pg")])).unwrap();
        assert_eq!(sock.tls, Tls::Off);
        for weak in ["prefer", "allow"] {
            let env = move |k: &str| (k == "PGSSLMODE").then(|| weak.to_owned());
            let e = ConnInfo::parse_with("postgres://u@h/db", &env).unwrap_err();
            assert!(
                e.starts_with(&format!("PGSSLMODE={weak} is refused")),
                "{e}"
            );
        }
        let e = ConnInfo::parse_with("postgres://u@h/db", &vars(&[("PGPORT", "54x")])).unwrap_err();
        assert!(e.contains("PGPORT `54x` is not a port"), "{e}");
    }

    #[test]
    fn verify_modes_are_read_and_removed_for_tokio_postgres() {
        let c = ConnInfo::parse(
            "postgres://u:pw@db.example/jobs?sslmode=verify-full&sslrootcert=%2Fetc%2Fca.pem&connect_timeout=3",
        )
        .unwrap();
        assert_eq!(c.tls, Tls::VerifyFull);
        assert_eq!(c.root_cert, Some(PathBuf::from("/etc/ca.pem")));
        assert_eq!(c.config.get_password(), Some(&b"pw"[..]));
        assert!(ConnInfo::parse("postgres://h/db?sslmode=sometimes").is_err());
        assert!(ConnInfo::parse("mysql://h/db").is_err());
    }

    #[test]
    fn the_password_file_is_read_as_libpq_reads_it() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("pgpass");
        std::fs::write(
            &f,
            "# comment\nother:5432:*:u:no\nh:*:jobs:u:p\\:w\\\\d\n*:*:*:*:fallback\n",
        )
        .unwrap();
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o600)).unwrap();
        assert_eq!(
            pgpass_lookup(&f, "h", "5433", "jobs", "u").as_deref(),
            Some("p:w\\d")
        );
        assert_eq!(
            pgpass_lookup(&f, "x", "1", "y", "z").as_deref(),
            Some("fallback")
        );
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o644)).unwrap();
        assert_eq!(
            pgpass_lookup(&f, "h", "5433", "jobs", "u"),
            None,
            "readable by others"
        );
    }
}
