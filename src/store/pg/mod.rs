//! The PostgreSQL store: locks for jobs that run on several hosts.
//!
//! A lock is a row of `onlyone_lease`, leased by the server's clock:
//!
//! - **Take**: one autocommit statement, `INSERT ... ON CONFLICT (name) DO
//!   UPDATE ... WHERE lock_until <= clock_timestamp() RETURNING epoch`. The
//!   epoch grows with every acquisition: it is the run's fence.
//! - **Renew**: `UPDATE ... SET lock_until = clock_timestamp() + L WHERE
//!   name = $1 AND epoch = $2 AND lock_until > clock_timestamp()`. No row:
//!   the lease is lost.
//! - **Release**: the same, setting `lock_until = clock_timestamp()`: the
//!   next holder gets it at once.
//!
//! The row outlives a server restart and needs no session, so it works
//! through PgBouncer. Every call has a client-side timeout (the statement
//! timeout T of the lease inequality, see [`crate::store::lease`]); a connection that
//! fails or times out is dropped and made again on the next call. Events
//! (the journal of a lock) go to `onlyone_event`, so every host sees every
//! host's runs.

pub mod conninfo;

use std::cell::RefCell;
use std::time::Duration;

use tokio_postgres::Client;
use tokio_postgres::error::SqlState;
use tokio_postgres::types::Type;

pub use conninfo::{ConnInfo, is_postgres_url};

use super::{Holder, LeaseRow, LeaseStore, Renewed, StoreError};

/// The SQL that creates the store's tables: run on first use when the role
/// may, else by a DBA (the README gives it with the least privileges).
pub const SCHEMA_SQL: &str = "\
CREATE TABLE IF NOT EXISTS onlyone_lease (
    name           text PRIMARY KEY,
    epoch          bigint NOT NULL,
    token          text NOT NULL,
    host           text,
    pid            integer,
    uid            integer,
    cmd            text,
    since          timestamptz NOT NULL,
    lock_until     timestamptz NOT NULL,
    stop_requested boolean NOT NULL DEFAULT false
);
CREATE TABLE IF NOT EXISTS onlyone_event (
    id    bigserial PRIMARY KEY,
    name  text NOT NULL,
    event text NOT NULL
);
CREATE INDEX IF NOT EXISTS onlyone_event_name ON onlyone_event (name, id);
";

/// At most this many events are kept per lock (the oldest go, as a
/// journal rotates).
pub const MAX_EVENTS: i64 = 30_000;

/// A connection to the store (made when first needed, made again after a
/// failure), and the timeout of every call.
pub struct PgStore {
    info: ConnInfo,
    rt: tokio::runtime::Runtime,
    client: RefCell<Option<Client>>,
    timeout: Duration,
    schema_checked: RefCell<bool>,
}

impl std::fmt::Debug for PgStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgStore")
            .field("url", &self.info.display)
            .finish()
    }
}

fn classify(e: &tokio_postgres::Error, url: &str) -> StoreError {
    let code = e.code();
    let text = match e.as_db_error() {
        Some(db) => db.message().to_owned(),
        None => {
            use std::error::Error;
            match e.source() {
                Some(s) => format!("{e}: {s}"),
                None => e.to_string(),
            }
        }
    };
    if code == Some(&SqlState::INVALID_PASSWORD) {
        return StoreError::Auth(format!(
            "the store `{url}` refused the credentials: {text}; check the user and PGPASSWORD or \
             ~/.pgpass"
        ));
    }
    if code == Some(&SqlState::INVALID_AUTHORIZATION_SPECIFICATION) {
        return StoreError::Auth(format!(
            "the store `{url}` refused the connection: {text}; the server's pg_hba.conf decides \
             which user, database, host and encryption (sslmode) may connect"
        ));
    }
    if e.as_db_error().is_none() {
        let hint = if text.contains("invalid peer certificate") {
            "; the server's certificate is not signed by a CA this host trusts (or not for this \
             host name): give its CA with sslrootcert=PATH in the URL"
        } else {
            ""
        };
        return StoreError::Unreachable(format!("cannot reach the store `{url}`: {text}{hint}"));
    }
    StoreError::Other(format!("the store `{url}` said: {text}"))
}

impl PgStore {
    /// A store at `url`; every call (connecting included) gives up after
    /// `timeout`. Nothing is sent yet.
    pub fn new(url: &str, timeout: Duration) -> Result<PgStore, StoreError> {
        let mut info = ConnInfo::parse(url).map_err(StoreError::Other)?;
        info.config.connect_timeout(timeout);
        info.config.keepalives(true);
        info.config.keepalives_idle(Duration::from_secs(10));
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_io()
            .enable_time()
            .build()
            .map_err(|e| StoreError::Other(format!("cannot start the store's I/O: {e}")))?;
        Ok(PgStore {
            info,
            rt,
            client: RefCell::new(None),
            timeout,
            schema_checked: RefCell::new(false),
        })
    }

    /// The URL, without its password.
    pub fn url(&self) -> &str {
        &self.info.display
    }

    /// The timeout of every call.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// A store like this one, with a connection of its own (for another
    /// thread).
    pub fn fresh(&self) -> Result<PgStore, StoreError> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_io()
            .enable_time()
            .build()
            .map_err(|e| StoreError::Other(format!("cannot start the store's I/O: {e}")))?;
        Ok(PgStore {
            info: self.info.clone(),
            rt,
            client: RefCell::new(None),
            timeout: self.timeout,
            schema_checked: RefCell::new(*self.schema_checked.borrow()),
        })
    }

    /// Drops the connection: the next call makes a new one.
    pub fn disconnect(&self) {
        *self.client.borrow_mut() = None;
    }

    fn connect(&self) -> Result<(), StoreError> {
        if self.client.borrow().is_some() {
            return Ok(());
        }
        let url = self.info.display.clone();
        let tls = self.info.rustls().map_err(StoreError::Other)?;
        let config = self.info.config.clone();
        let timeout = self.timeout;
        let client = self.rt.block_on(async move {
            let made = match tls {
                None => {
                    let (client, conn) =
                        tokio::time::timeout(timeout, config.connect(tokio_postgres::NoTls))
                            .await
                            .map_err(|_| timed_out(&url, timeout))?
                            .map_err(|e| classify(&e, &url))?;
                    tokio::spawn(async move {
                        let _ = conn.await;
                    });
                    client
                }
                Some(tls) => {
                    let connector = tokio_postgres_rustls::MakeRustlsConnect::new(tls);
                    let (client, conn) = tokio::time::timeout(timeout, config.connect(connector))
                        .await
                        .map_err(|_| timed_out(&url, timeout))?
                        .map_err(|e| classify(&e, &url))?;
                    tokio::spawn(async move {
                        let _ = conn.await;
                    });
                    client
                }
            };
            Ok::<Client, StoreError>(made)
        })?;
        *self.client.borrow_mut() = Some(client);
        if !*self.schema_checked.borrow() {
            self.ensure_schema()?;
            *self.schema_checked.borrow_mut() = true;
        }
        Ok(())
    }

    /// Runs `q` with the connection, within the timeout; a failure drops
    /// the connection.
    fn with<T>(
        &self,
        q: impl for<'c> FnOnce(
            &'c Client,
        ) -> std::pin::Pin<
            Box<dyn std::future::Future<Output = Result<T, tokio_postgres::Error>> + 'c>,
        >,
    ) -> Result<T, StoreError> {
        self.connect()?;
        let guard = self.client.borrow();
        let client = guard.as_ref().ok_or_else(|| {
            StoreError::Unreachable(format!("cannot reach the store `{}`", self.info.display))
        })?;
        let url = &self.info.display;
        let timeout = self.timeout;
        let result = self.rt.block_on(async {
            match tokio::time::timeout(timeout, q(client)).await {
                Ok(Ok(v)) => Ok(v),
                Ok(Err(e)) => Err(classify(&e, url)),
                Err(_) => Err(timed_out(url, timeout)),
            }
        });
        drop(guard);
        if let Err(StoreError::Unreachable(_)) = &result {
            self.disconnect();
        }
        result
    }

    /// Creates the tables when they are missing and the role may.
    fn ensure_schema(&self) -> Result<(), StoreError> {
        let present = self.with(|c| {
            Box::pin(async move {
                let row = c
                    .query_typed_one(
                        "SELECT to_regclass('onlyone_lease') IS NOT NULL \
                         AND to_regclass('onlyone_event') IS NOT NULL",
                        &[],
                    )
                    .await?;
                Ok(row.get::<_, bool>(0))
            })
        })?;
        if present {
            return Ok(());
        }
        self.with(|c| Box::pin(async move { c.batch_execute(SCHEMA_SQL).await }))
            .map_err(|e| match e {
                StoreError::Other(why) => StoreError::Other(format!(
                    "the store's tables do not exist and this role cannot create them ({why}); \
                     have them created with the SQL in the README (\"Several hosts\")"
                )),
                e => e,
            })
    }

    /// Takes the lock `name` for `lease`, if its lease has run out (or it
    /// never existed): the new epoch (the fence), or `None` when it is
    /// held.
    pub fn acquire(
        &self,
        name: &str,
        who: &Holder<'_>,
        lease: Duration,
    ) -> Result<Option<i64>, StoreError> {
        let ms = lease.as_millis() as i64;
        let (name, token, host, cmd) = (
            name.to_owned(),
            who.token.to_owned(),
            who.host.to_owned(),
            who.cmd.to_owned(),
        );
        let (pid, uid) = (who.pid as i32, who.uid as i32);
        self.with(move |c| {
            Box::pin(async move {
                let row = c
                    .query_typed_opt(
                        "INSERT INTO onlyone_lease AS l \
                           (name, epoch, token, host, pid, uid, cmd, since, lock_until, stop_requested) \
                         VALUES ($1, 1, $2, $3, $4, $5, $6, clock_timestamp(), \
                                 clock_timestamp() + $7 * interval '1 millisecond', false) \
                         ON CONFLICT (name) DO UPDATE SET \
                           epoch = l.epoch + 1, token = EXCLUDED.token, host = EXCLUDED.host, \
                           pid = EXCLUDED.pid, uid = EXCLUDED.uid, cmd = EXCLUDED.cmd, \
                           since = clock_timestamp(), \
                           lock_until = clock_timestamp() + $7 * interval '1 millisecond', \
                           stop_requested = false \
                         WHERE l.lock_until <= clock_timestamp() \
                         RETURNING epoch",
                        &[
                            (&name, Type::TEXT),
                            (&token, Type::TEXT),
                            (&host, Type::TEXT),
                            (&pid, Type::INT4),
                            (&uid, Type::INT4),
                            (&cmd, Type::TEXT),
                            (&(ms as f64), Type::FLOAT8),
                        ],
                    )
                    .await?;
                Ok(row.map(|r| r.get::<_, i64>(0)))
            })
        })
    }

    /// Renews the lease of epoch `epoch` for `lease` more, from now by the
    /// server's clock, if it still holds.
    pub fn renew(&self, name: &str, epoch: i64, lease: Duration) -> Result<Renewed, StoreError> {
        let ms = lease.as_millis() as f64;
        let name = name.to_owned();
        self.with(move |c| {
            Box::pin(async move {
                let row = c
                    .query_typed_opt(
                        "UPDATE onlyone_lease \
                         SET lock_until = clock_timestamp() + $3 * interval '1 millisecond' \
                         WHERE name = $1 AND epoch = $2 AND lock_until > clock_timestamp() \
                         RETURNING stop_requested",
                        &[
                            (&name, Type::TEXT),
                            (&epoch, Type::INT8),
                            (&ms, Type::FLOAT8),
                        ],
                    )
                    .await?;
                Ok(match row {
                    Some(r) => Renewed::Held { stop: r.get(0) },
                    None => Renewed::Lost,
                })
            })
        })
    }

    /// Ends the lease of epoch `epoch` now: the next holder gets it at once.
    pub fn release(&self, name: &str, epoch: i64) -> Result<bool, StoreError> {
        let name = name.to_owned();
        self.with(move |c| {
            Box::pin(async move {
                let row = c
                    .query_typed_opt(
                        "UPDATE onlyone_lease SET lock_until = clock_timestamp(), \
                           stop_requested = false \
                         WHERE name = $1 AND epoch = $2 AND lock_until > clock_timestamp() \
                         RETURNING epoch",
                        &[(&name, Type::TEXT), (&epoch, Type::INT8)],
                    )
                    .await?;
                Ok(row.is_some())
            })
        })
    }

    const ROW: &'static str = "SELECT name, epoch, token, host, pid, uid, cmd, \
         extract(epoch from since)::float8, extract(epoch from lock_until)::float8, \
         (extract(epoch from (lock_until - clock_timestamp())) * 1000)::bigint, stop_requested \
         FROM onlyone_lease";

    fn row(r: &tokio_postgres::Row) -> LeaseRow {
        LeaseRow {
            name: r.get(0),
            epoch: r.get(1),
            token: r.get(2),
            host: r.get(3),
            pid: r.get::<_, Option<i32>>(4).map(|p| p as u32),
            uid: r.get::<_, Option<i32>>(5).map(|p| p as u32),
            cmd: r.get(6),
            since: r.get(7),
            until: r.get(8),
            left_ms: r.get(9),
            stop_requested: r.get(10),
        }
    }

    /// The lease row of `name`, if the lock was ever taken.
    pub fn inspect(&self, name: &str) -> Result<Option<LeaseRow>, StoreError> {
        let name = name.to_owned();
        self.with(move |c| {
            Box::pin(async move {
                let sql = format!("{} WHERE name = $1", Self::ROW);
                Ok(c.query_typed_opt(&sql, &[(&name, Type::TEXT)])
                    .await?
                    .map(|r| Self::row(&r)))
            })
        })
    }

    /// Every lease row, by name.
    pub fn list(&self) -> Result<Vec<LeaseRow>, StoreError> {
        self.with(|c| {
            Box::pin(async move {
                let sql = format!("{} ORDER BY name", Self::ROW);
                Ok(c.query_typed(&sql, &[])
                    .await?
                    .iter()
                    .map(Self::row)
                    .collect())
            })
        })
    }

    /// Asks the live holder of `name` to end its run: its epoch, or `None`
    /// when nothing holds it.
    pub fn request_stop(&self, name: &str) -> Result<Option<i64>, StoreError> {
        let name = name.to_owned();
        self.with(move |c| {
            Box::pin(async move {
                let row = c
                    .query_typed_opt(
                        "UPDATE onlyone_lease SET stop_requested = true \
                         WHERE name = $1 AND lock_until > clock_timestamp() RETURNING epoch",
                        &[(&name, Type::TEXT)],
                    )
                    .await?;
                Ok(row.map(|r| r.get::<_, i64>(0)))
            })
        })
    }

    /// Appends an event (a journal line) to `name`'s history; the oldest
    /// go past [`MAX_EVENTS`].
    pub fn append_event(&self, name: &str, line: &str) -> Result<(), StoreError> {
        let (name, line) = (name.to_owned(), line.trim_end().to_owned());
        self.with(move |c| {
            Box::pin(async move {
                let id: i64 = c
                    .query_typed_one(
                        "INSERT INTO onlyone_event (name, event) VALUES ($1, $2) RETURNING id",
                        &[(&name, Type::TEXT), (&line, Type::TEXT)],
                    )
                    .await?
                    .get(0);
                // Trimmed now and then, not on every event.
                if id % 512 == 0 {
                    c.query_typed(
                        "DELETE FROM onlyone_event WHERE name = $1 AND id <= \
                         (SELECT id FROM onlyone_event WHERE name = $1 \
                          ORDER BY id DESC OFFSET $2 LIMIT 1)",
                        &[(&name, Type::TEXT), (&MAX_EVENTS, Type::INT8)],
                    )
                    .await?;
                }
                Ok(())
            })
        })
    }

    /// Every event of `name`, oldest first (the order they were appended).
    pub fn events(&self, name: &str) -> Result<Vec<String>, StoreError> {
        let name = name.to_owned();
        self.with(move |c| {
            Box::pin(async move {
                Ok(c.query_typed(
                    "SELECT event FROM onlyone_event WHERE name = $1 ORDER BY id",
                    &[(&name, Type::TEXT)],
                )
                .await?
                .iter()
                .map(|r| r.get::<_, String>(0))
                .collect())
            })
        })
    }

    /// Every lock name the store has events or a lease for.
    pub fn names(&self) -> Result<Vec<String>, StoreError> {
        self.with(|c| {
            Box::pin(async move {
                Ok(c.query_typed(
                    "SELECT name FROM onlyone_lease UNION SELECT DISTINCT name FROM onlyone_event \
                         ORDER BY 1",
                    &[],
                )
                .await?
                .iter()
                .map(|r| r.get::<_, String>(0))
                .collect())
            })
        })
    }
}

fn timed_out(url: &str, t: Duration) -> StoreError {
    StoreError::Unreachable(format!(
        "the store `{url}` did not answer within {}",
        crate::text::compact_duration(t)
    ))
}

impl LeaseStore for PgStore {
    fn url(&self) -> &str {
        PgStore::url(self)
    }

    fn fresh(&self) -> Result<Box<dyn LeaseStore>, StoreError> {
        Ok(Box::new(PgStore::fresh(self)?))
    }

    fn acquire(
        &self,
        name: &str,
        who: &Holder<'_>,
        lease: Duration,
    ) -> Result<Option<i64>, StoreError> {
        PgStore::acquire(self, name, who, lease)
    }

    fn renew(&self, name: &str, epoch: i64, lease: Duration) -> Result<Renewed, StoreError> {
        PgStore::renew(self, name, epoch, lease)
    }

    fn release(&self, name: &str, epoch: i64) -> Result<bool, StoreError> {
        PgStore::release(self, name, epoch)
    }

    fn inspect(&self, name: &str) -> Result<Option<LeaseRow>, StoreError> {
        PgStore::inspect(self, name)
    }

    fn list(&self) -> Result<Vec<LeaseRow>, StoreError> {
        PgStore::list(self)
    }

    fn request_stop(&self, name: &str) -> Result<Option<i64>, StoreError> {
        PgStore::request_stop(self, name)
    }

    fn append_event(&self, name: &str, line: &str) -> Result<(), StoreError> {
        PgStore::append_event(self, name, line)
    }

    fn events(&self, name: &str) -> Result<Vec<String>, StoreError> {
        PgStore::events(self, name)
    }

    fn names(&self) -> Result<Vec<String>, StoreError> {
        PgStore::names(self)
    }
}
