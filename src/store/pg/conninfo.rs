//! A `postgres://` URL as libpq reads it: the parameters tokio-postgres
//! does not know (`sslmode=verify-ca|verify-full`, `sslrootcert`), the
//! password from `PGPASSWORD` or the password file, and the TLS setup
//! each `sslmode` asks for.

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
    /// No TLS (`disable`).
    Off,
    /// TLS when the server offers it, certificate not checked (`prefer`,
    /// libpq's default; `allow`).
    Prefer,
    /// TLS always, certificate not checked (`require`).
    Require,
    /// TLS, the certificate's chain checked, not its name (`verify-ca`).
    VerifyCa,
    /// TLS, the chain and the host name checked (`verify-full`).
    VerifyFull,
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

/// True for a URL that names the PostgreSQL store.
pub fn is_postgres_url(s: &str) -> bool {
    s.starts_with("postgres://") || s.starts_with("postgresql://")
}

impl ConnInfo {
    /// Parses `url`, taking the password from it, else `PGPASSWORD`, else
    /// the password file (`PGPASSFILE`, else `~/.pgpass`).
    pub fn parse(url: &str) -> Result<ConnInfo, String> {
        if !is_postgres_url(url) {
            return Err(format!(
                "`{}` is not a store URL: use postgres://USER@HOST[:PORT]/DATABASE",
                redact(url)
            ));
        }
        let (base, query) = match url.split_once('?') {
            Some((b, q)) => (b, q),
            None => (url, ""),
        };
        let mut tls = Tls::Prefer;
        let mut root_cert = None;
        let mut kept: Vec<&str> = Vec::new();
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            match k {
                "sslmode" => {
                    tls = match v {
                        "disable" => Tls::Off,
                        "allow" | "prefer" => Tls::Prefer,
                        "require" => Tls::Require,
                        "verify-ca" => Tls::VerifyCa,
                        "verify-full" => Tls::VerifyFull,
                        other => {
                            return Err(format!(
                                "sslmode `{other}` is not one of disable, allow, prefer, require, \
                                 verify-ca, verify-full"
                            ));
                        }
                    };
                }
                "sslrootcert" => root_cert = Some(PathBuf::from(percent_decode(v))),
                _ => kept.push(pair),
            }
        }
        let rebuilt = if kept.is_empty() {
            base.to_owned()
        } else {
            format!("{base}?{}", kept.join("&"))
        };
        let mut config = tokio_postgres::Config::from_str(&rebuilt)
            .map_err(|e| format!("cannot read the store URL `{}`: {e}", redact(url)))?;
        config.ssl_mode(match tls {
            Tls::Off => SslMode::Disable,
            Tls::Prefer => SslMode::Prefer,
            _ => SslMode::Require,
        });
        // libpq's default user is the operating system's.
        if config.get_user().is_none()
            && let Some(user) = crate::sys::user_name(rustix::process::geteuid().as_raw())
        {
            config.user(user);
        }
        if config.get_password().is_none()
            && let Some(pw) = password_from_env(&config)
        {
            config.password(pw);
        }
        config.application_name("onlyone");
        Ok(ConnInfo {
            config,
            tls,
            root_cert,
            display: redact(url),
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
            Tls::Prefer | Tls::Require => builder
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

/// The URL with its password replaced by `***`.
pub fn redact(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let (auth, tail) = match rest.find(['/', '?']) {
        Some(i) => rest.split_at(i),
        None => (rest, ""),
    };
    match auth.rsplit_once('@') {
        Some((userinfo, host)) => match userinfo.split_once(':') {
            Some((user, _)) => format!("{scheme}://{user}:***@{host}{tail}"),
            None => url.to_owned(),
        },
        None => url.to_owned(),
    }
}

/// `%XX` escapes decoded (a path in a URL query).
fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%'
            && i + 2 < b.len()
            && let Ok(v) = u8::from_str_radix(&s[i + 1..i + 3], 16)
        {
            out.push(v);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// `PGPASSWORD`, else the password file's entry for this connection.
fn password_from_env(config: &tokio_postgres::Config) -> Option<String> {
    if let Ok(pw) = std::env::var("PGPASSWORD") {
        return Some(pw);
    }
    let file = match std::env::var_os("PGPASSFILE") {
        Some(f) => PathBuf::from(f),
        None => PathBuf::from(std::env::var_os("HOME")?).join(".pgpass"),
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

/// `prefer`/`require`: TLS without checking the certificate (libpq's
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
    fn passwords_never_show_in_messages() {
        assert_eq!(
            redact("postgres://u:secret@h:5/db?sslmode=require"),
            "postgres://u:***@h:5/db?sslmode=require"
        );
        assert_eq!(redact("postgres://u@h/db"), "postgres://u@h/db");
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
