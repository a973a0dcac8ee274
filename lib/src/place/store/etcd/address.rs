//! An etcd store's URL: its members, its key prefix, TLS and credentials.
//!
//! `etcd://[USER@]HOST:PORT[,HOST:PORT...][/PREFIX][?PARAMS]`, or
//! `etcds://` for TLS. The parameters: `cacert=PATH` (the CA that signed
//! the members' certificates; else the web's public roots), `cert=PATH` and
//! `key=PATH` (a client certificate and its key, PEM), `password_file=PATH`
//! (the user's password, its first line). A password is never in the URL
//! (it would be on the command line, in `ps` and the journal): it comes
//! from `password_file` or from `ETCDCTL_PASSWORD`, etcdctl's own variable.

use std::time::Duration;

use ureq::tls::{Certificate, ClientCert, PemItem, PrivateKey, RootCerts, TlsConfig};

/// The key prefix when the URL names none.
pub(super) const DEFAULT_PREFIX: &str = "onlyone/";

/// What a URL says.
#[derive(Clone)]
pub(super) struct Address {
    /// The URL as given (it holds no password), for messages.
    pub display: String,
    /// `http://HOST:PORT` or `https://HOST:PORT`, one a member, in the
    /// URL's order.
    pub members: Vec<String>,
    /// Every key of the store starts with it (ends with `/`).
    pub prefix: String,
    /// The user and password, when the URL names a user.
    pub auth: Option<(String, String)>,
    /// TLS's configuration (`etcds://`).
    pub tls: Option<TlsConfig>,
}

impl std::fmt::Debug for Address {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.display)
    }
}

impl Address {
    /// Reads `url`; `env` gives the environment's variables (the
    /// password's).
    pub fn parse(url: &str, env: &dyn Fn(&str) -> Option<String>) -> Result<Address, String> {
        let shown = masked(url);
        let bad = |why: &str| format!("the store's URL `{shown}` {why}");
        let (scheme, rest) = url.split_once("://").ok_or_else(|| bad("has no scheme"))?;
        let tls = match scheme {
            "etcd" => false,
            "etcds" => true,
            _ => return Err(bad("is not etcd:// or etcds://")),
        };
        let (rest, query) = match rest.split_once('?') {
            Some((r, q)) => (r, Some(q)),
            None => (rest, None),
        };
        let (hosts, prefix) = match rest.split_once('/') {
            Some((h, p)) => (h, p),
            None => (rest, ""),
        };
        let (user, hosts) = match hosts.rsplit_once('@') {
            Some((u, h)) => (Some(u), h),
            None => (None, hosts),
        };
        if user.is_some_and(|u| u.contains(':')) {
            return Err(bad(
                "has a password: a password on the command line is seen by every user of the \
                 host; put it in a file named by `?password_file=PATH`, or in ETCDCTL_PASSWORD",
            ));
        }
        let members = members(hosts, tls).map_err(|why| bad(&why))?;
        let prefix = prefix_of(prefix).map_err(|why| bad(&why))?;
        let params = params(query).map_err(|why| bad(&why))?;
        let get = |k: &str| params.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
        if let Some((k, _)) = params.iter().find(|(k, _)| !tls && k != "password_file") {
            return Err(bad(&format!(
                "has `{k}=`, which only a TLS store takes: use etcds://"
            )));
        }
        let auth = match user {
            None if get("password_file").is_some() => {
                return Err(bad(
                    "has a password_file but no user: etcd://USER@HOST:PORT",
                ));
            }
            None => None,
            Some("") => return Err(bad("has an empty user")),
            Some(u) => Some((u.to_owned(), password(get("password_file"), env, url)?)),
        };
        let tls = match tls {
            false => None,
            true => Some(tls_config(get("cacert"), get("cert"), get("key"), url)?),
        };
        Ok(Address {
            display: url.to_owned(),
            members,
            prefix,
            auth,
            tls,
        })
    }

    /// An agent of this address: TLS as it says, every call's timeout
    /// given with it.
    pub fn agent(&self) -> ureq::Agent {
        let mut b = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(Duration::from_secs(5)))
            .user_agent(concat!("onlyone/", env!("CARGO_PKG_VERSION")));
        if let Some(tls) = &self.tls {
            b = b.tls_config(tls.clone());
        }
        b.build().into()
    }
}

/// The URL with a password in it replaced by `***`.
fn masked(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let hosts_end = rest.find(['/', '?']).unwrap_or(rest.len());
    match rest[..hosts_end].rsplit_once('@') {
        Some((user, _)) if user.contains(':') => {
            let name = user.split(':').next().unwrap_or("");
            let at = rest[..hosts_end].rfind('@').unwrap_or(0);
            format!("{scheme}://{name}:***{}", &rest[at..])
        }
        _ => url.to_owned(),
    }
}

/// The members: `HOST:PORT`, separated by commas.
fn members(hosts: &str, tls: bool) -> Result<Vec<String>, String> {
    let scheme = if tls { "https" } else { "http" };
    let mut out = Vec::new();
    for h in hosts.split(',') {
        let (host, port) = h
            .rsplit_once(':')
            .ok_or_else(|| format!("names `{h}` without a port: HOST:PORT (etcd's is 2379)"))?;
        if host.is_empty() || port.parse::<u16>().map_or(true, |p| p == 0) {
            return Err(format!("names `{h}`, which is not HOST:PORT"));
        }
        if !host
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b".-_[]:".contains(&b))
        {
            return Err(format!("names `{h}`, which is not HOST:PORT"));
        }
        out.push(format!("{scheme}://{host}:{port}"));
    }
    Ok(out)
}

/// The key prefix: the URL's path, ended with `/`.
fn prefix_of(path: &str) -> Result<String, String> {
    if path.is_empty() {
        return Ok(DEFAULT_PREFIX.to_owned());
    }
    if path.starts_with('/')
        || path.contains("//")
        || path.bytes().any(|b| b.is_ascii_control() || b == b'%')
    {
        return Err(format!(
            "has the prefix `{path}`, which is not a key prefix"
        ));
    }
    Ok(if path.ends_with('/') {
        path.to_owned()
    } else {
        format!("{path}/")
    })
}

/// The parameters, each known and given once.
fn params(query: Option<&str>) -> Result<Vec<(String, String)>, String> {
    let mut out: Vec<(String, String)> = Vec::new();
    for p in query.unwrap_or("").split('&').filter(|p| !p.is_empty()) {
        let (k, v) = p
            .split_once('=')
            .ok_or_else(|| format!("has `{p}`, which is not NAME=VALUE"))?;
        if !["cacert", "cert", "key", "password_file"].contains(&k) {
            return Err(format!(
                "has `{k}=`, which an etcd store does not take (cacert, cert, key, password_file)"
            ));
        }
        if v.is_empty() {
            return Err(format!("has an empty `{k}=`"));
        }
        if out.iter().any(|(n, _)| n == k) {
            return Err(format!("has `{k}=` twice"));
        }
        out.push((k.to_owned(), v.to_owned()));
    }
    Ok(out)
}

/// The user's password: the file's first line, else `ETCDCTL_PASSWORD`.
fn password(
    file: Option<&str>,
    env: &dyn Fn(&str) -> Option<String>,
    url: &str,
) -> Result<String, String> {
    if let Some(path) = file {
        let text = std::fs::read_to_string(path).map_err(|e| {
            format!("cannot read the password file `{path}` of the store `{url}`: {e}")
        })?;
        let line = text.lines().next().unwrap_or("").to_owned();
        if line.is_empty() {
            return Err(format!(
                "the password file `{path}` of the store `{url}` is empty: put the password \
                 on its first line"
            ));
        }
        return Ok(line);
    }
    env("ETCDCTL_PASSWORD")
        .filter(|p| !p.is_empty())
        .ok_or_else(|| {
            format!(
                "the store `{url}` names a user but no password: set ETCDCTL_PASSWORD, or name a \
             file with `?password_file=PATH`"
            )
        })
}

/// TLS's configuration: the roots (`cacert`, else the system's) and the
/// client certificate (`cert` with `key`, or neither).
fn tls_config(
    cacert: Option<&str>,
    cert: Option<&str>,
    key: Option<&str>,
    url: &str,
) -> Result<TlsConfig, String> {
    let mut b = TlsConfig::builder();
    if let Some(ca) = cacert {
        let certs = pem_certs(ca, url)?;
        b = b.root_certs(RootCerts::new_with_certs(&certs));
    }
    match (cert, key) {
        (None, None) => {}
        (Some(c), Some(k)) => {
            let chain = pem_certs(c, url)?;
            let key = pem_key(k, url)?;
            b = b.client_cert(Some(ClientCert::new_with_certs(&chain, key)));
        }
        _ => {
            return Err(format!(
                "the store's URL `{url}` gives a client certificate without its key, or a key \
                 without its certificate: give both `cert=` and `key=`"
            ));
        }
    }
    Ok(b.build())
}

fn read_pem(path: &str, what: &str, url: &str) -> Result<Vec<u8>, String> {
    std::fs::read(path)
        .map_err(|e| format!("cannot read the {what} `{path}` of the store `{url}`: {e}"))
}

/// The certificates of a PEM file, at least one.
fn pem_certs(path: &str, url: &str) -> Result<Vec<Certificate<'static>>, String> {
    let pem = read_pem(path, "certificate", url)?;
    let mut out = Vec::new();
    for item in ureq::tls::parse_pem(&pem) {
        if let Ok(PemItem::Certificate(c)) = item {
            out.push(c);
        }
    }
    if out.is_empty() {
        return Err(format!(
            "the file `{path}` of the store `{url}` holds no PEM certificate"
        ));
    }
    Ok(out)
}

/// The private key of a PEM file.
fn pem_key(path: &str, url: &str) -> Result<PrivateKey<'static>, String> {
    let pem = read_pem(path, "key", url)?;
    for item in ureq::tls::parse_pem(&pem) {
        if let Ok(PemItem::PrivateKey(k)) = item {
            return Ok(k);
        }
    }
    Err(format!(
        "the file `{path}` of the store `{url}` holds no PEM private key"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn no_env(_: &str) -> Option<String> {
        None
    }

    #[test]
    fn members_prefix_and_scheme() {
        let a = Address::parse("etcd://10.0.0.1:2379,db-2:2380/jobs/x", &no_env).unwrap();
        assert_eq!(a.members, ["http://10.0.0.1:2379", "http://db-2:2380"]);
        assert_eq!(a.prefix, "jobs/x/");
        assert!(a.auth.is_none() && a.tls.is_none());
        let a = Address::parse("etcd://h:1", &no_env).unwrap();
        assert_eq!(a.prefix, DEFAULT_PREFIX);
        let a = Address::parse("etcds://h:1/p/", &no_env).unwrap();
        assert_eq!(a.members, ["https://h:1"]);
        assert_eq!(a.prefix, "p/");
        assert!(a.tls.is_some());
    }

    #[test]
    fn bad_urls_say_what_to_do() {
        for (url, says) in [
            ("etcd://h", "without a port"),
            ("etcd://h:0", "not HOST:PORT"),
            ("etcd://:2379", "not HOST:PORT"),
            ("etcd://u:secret@h:2379", "ETCDCTL_PASSWORD"),
            ("etcd://h:2379?cacert=/x", "use etcds://"),
            ("etcds://h:2379?sslmode=x", "does not take"),
            ("etcds://h:2379?cert=/x", "give both"),
            ("etcd://u@h:2379", "no password"),
            ("etcd://h:2379?password_file=/x", "no user"),
            (
                "etcds://h:2379?cacert=/nonexistent/ca.pem",
                "cannot read the certificate",
            ),
            ("etcd://h:2379//x", "not a key prefix"),
        ] {
            let e = Address::parse(url, &no_env).unwrap_err();
            assert!(e.contains(says), "{url}: {e}");
            assert!(!e.contains("secret"), "{e}");
        }
    }

    #[test]
    fn the_password_comes_from_a_file_or_the_environment() {
        let env = |k: &str| (k == "ETCDCTL_PASSWORD").then(|| "from-env".to_owned());
        let a = Address::parse("etcd://jobs@h:2379", &env).unwrap();
        assert_eq!(a.auth, Some(("jobs".into(), "from-env".into())));
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("pw");
        std::fs::write(&f, "from-file\nignored\n").unwrap();
        let url = format!("etcd://jobs@h:2379?password_file={}", f.display());
        let a = Address::parse(&url, &env).unwrap();
        assert_eq!(a.auth, Some(("jobs".into(), "from-file".into())));
    }
}
