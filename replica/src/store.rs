//! The bucket: where a replica lives (`s3://BUCKET/PREFIX`, an endpoint, credentials) and a
//! synchronous client for it. The client is `object_store`'s S3 store driven by a tokio
//! runtime that this module owns; nothing outside this crate sees either.

use crate::error::ReplicaError;
use bytes::Bytes;
use futures::{StreamExt, TryStreamExt};
use object_store::aws::{AmazonS3, AmazonS3Builder};
use object_store::path::Path as Key;
use object_store::{
    BackoffConfig, ClientOptions, ObjectStore, ObjectStoreExt, PutPayload, RetryConfig,
};
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Retries of one request by the client, after its first try.
pub const RETRIES_MAX: usize = 4;
/// First wait before a retry of a request; each next one doubles, up to `RETRY_BACKOFF_MAX`.
pub const RETRY_BACKOFF_FIRST: Duration = Duration::from_millis(100);
/// Longest wait between two tries of a request.
pub const RETRY_BACKOFF_MAX: Duration = Duration::from_secs(2);
/// How long one request and its retries may take in all.
pub const REQUEST_RETRY_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a connection may take to open.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// How long one request may take (a 64 MiB sealed segment over a slow link included).
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(120);
/// Requests in flight at once (uploads of a round, downloads of a restore).
pub const REQUESTS_IN_FLIGHT: usize = 32;
/// The region used when neither `AWS_REGION` nor `AWS_DEFAULT_REGION` is set and an endpoint
/// is given (S3-compatible servers mostly ignore it, but signatures name one).
pub const REGION_DEFAULT: &str = "us-east-1";

/// Where a replica lives: a bucket, a prefix in it, and how to reach it.
#[derive(Clone)]
pub struct Target {
    /// The bucket's name.
    pub bucket: String,
    /// The key prefix (no leading or trailing `/`; empty for the bucket's top).
    pub prefix: String,
    /// An S3-compatible endpoint (`http://127.0.0.1:9000`), or `None` for AWS.
    pub endpoint: Option<String>,
    /// The signing region.
    pub region: String,
    access_key_id: String,
    secret_access_key: String,
    session_token: Option<String>,
}

impl std::fmt::Debug for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The secret stays out of logs and error messages.
        f.debug_struct("Target")
            .field("bucket", &self.bucket)
            .field("prefix", &self.prefix)
            .field("endpoint", &self.endpoint)
            .field("region", &self.region)
            .finish_non_exhaustive()
    }
}

impl Target {
    /// Reads `s3://BUCKET[/PREFIX]`, an endpoint (`--endpoint`, else `AWS_ENDPOINT_URL`, else
    /// `AWS_ENDPOINT`, else AWS itself) and the credentials from the environment
    /// (`AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, optional `AWS_SESSION_TOKEN`,
    /// `AWS_REGION` or `AWS_DEFAULT_REGION`). Plain `http://` is accepted only for a loopback
    /// host.
    pub fn from_env(url: &str, endpoint: Option<&str>) -> Result<Target, ReplicaError> {
        let var = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
        let (bucket, prefix) = parse_url(url)?;
        let endpoint = endpoint
            .map(str::to_owned)
            .or_else(|| var("AWS_ENDPOINT_URL"))
            .or_else(|| var("AWS_ENDPOINT"));
        if let Some(e) = &endpoint {
            check_endpoint(e)?;
        }
        let access_key_id = var("AWS_ACCESS_KEY_ID").ok_or(ReplicaError::MissingCredentials {
            variable: "AWS_ACCESS_KEY_ID",
        })?;
        let secret_access_key =
            var("AWS_SECRET_ACCESS_KEY").ok_or(ReplicaError::MissingCredentials {
                variable: "AWS_SECRET_ACCESS_KEY",
            })?;
        let region = match var("AWS_REGION").or_else(|| var("AWS_DEFAULT_REGION")) {
            Some(r) => r,
            None if endpoint.is_some() => REGION_DEFAULT.to_owned(),
            None => {
                return Err(ReplicaError::MissingCredentials {
                    variable: "AWS_REGION",
                })
            }
        };
        Ok(Target {
            bucket,
            prefix,
            endpoint,
            region,
            access_key_id,
            secret_access_key,
            session_token: var("AWS_SESSION_TOKEN"),
        })
    }

    /// A target with the credentials given here rather than read from the environment (for
    /// hosts that keep them elsewhere, and for tests). `url` and `endpoint` are checked as
    /// [`Target::from_env`] checks them.
    pub fn with_credentials(
        url: &str,
        endpoint: Option<&str>,
        region: &str,
        access_key_id: &str,
        secret_access_key: &str,
    ) -> Result<Target, ReplicaError> {
        let (bucket, prefix) = parse_url(url)?;
        if let Some(e) = endpoint {
            check_endpoint(e)?;
        }
        Ok(Target {
            bucket,
            prefix,
            endpoint: endpoint.map(str::to_owned),
            region: region.to_owned(),
            access_key_id: access_key_id.to_owned(),
            secret_access_key: secret_access_key.to_owned(),
            session_token: None,
        })
    }

    /// The replica's location as a person writes it: `s3://BUCKET/PREFIX`.
    pub fn location(&self) -> String {
        if self.prefix.is_empty() {
            format!("s3://{}", self.bucket)
        } else {
            format!("s3://{}/{}", self.bucket, self.prefix)
        }
    }
}

/// Splits `s3://BUCKET[/PREFIX]` into bucket and prefix (trailing `/` dropped).
fn parse_url(url: &str) -> Result<(String, String), ReplicaError> {
    let bad = |reason: &str| ReplicaError::InvalidUrl {
        url: url.to_owned(),
        reason: reason.to_owned(),
    };
    let rest = url
        .strip_prefix("s3://")
        .ok_or_else(|| bad("it does not start with s3://"))?;
    let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
    let bucket_ok = (3..=63).contains(&bucket.len())
        && bucket
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.')
        && !bucket.starts_with(['-', '.'])
        && !bucket.ends_with(['-', '.']);
    if !bucket_ok {
        return Err(bad(
            "a bucket name is 3 to 63 lowercase letters, digits, '-' and '.'",
        ));
    }
    let prefix = prefix.trim_end_matches('/');
    let prefix_ok = prefix.split('/').all(|part| {
        prefix.is_empty()
            || (!part.is_empty()
                && part != "."
                && part != ".."
                && part
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"-_.!*'()".contains(&b)))
    });
    if !prefix_ok {
        return Err(bad(
            "a prefix is parts of letters, digits and -_.!*'() separated by single '/'",
        ));
    }
    Ok((bucket.to_owned(), prefix.to_owned()))
}

/// Accepts `https://HOST[:PORT]`, and `http://` for a loopback host only.
fn check_endpoint(endpoint: &str) -> Result<(), ReplicaError> {
    let bad = |reason: &str| ReplicaError::InvalidEndpoint {
        endpoint: endpoint.to_owned(),
        reason: reason.to_owned(),
    };
    let (scheme, rest) = endpoint
        .split_once("://")
        .ok_or_else(|| bad("give it as http://HOST:PORT or https://HOST"))?;
    let authority = rest.split('/').next().unwrap_or("");
    let host = match authority.strip_prefix('[') {
        Some(v6) => v6.split(']').next().unwrap_or(""),
        None => authority.rsplit_once(':').map_or(authority, |(h, _)| h),
    };
    if host.is_empty() {
        return Err(bad("it names no host"));
    }
    match scheme {
        "https" => Ok(()),
        "http" => {
            let loopback = host == "localhost"
                || host
                    .parse::<std::net::IpAddr>()
                    .is_ok_and(|ip| ip.is_loopback());
            if loopback {
                Ok(())
            } else {
                Err(bad(
                    "plain http is accepted only on loopback (127.0.0.1, ::1, localhost); use https",
                ))
            }
        }
        _ => Err(bad("the scheme must be http or https")),
    }
}

/// A listed object: its name below the prefix and its length.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Listed {
    /// The key below the replica's prefix (`manifests/...`, `data/...`).
    pub name: String,
    /// The object's length in bytes.
    pub bytes: u64,
}

/// Requests made and bytes moved by a [`Store`], for reports and tests.
#[derive(Debug, Default)]
pub struct Traffic {
    /// Successful PUTs.
    pub puts: AtomicU64,
    /// Bytes of the successful PUTs.
    pub put_bytes: AtomicU64,
    /// Successful GETs.
    pub gets: AtomicU64,
    /// Bytes of the successful GETs.
    pub get_bytes: AtomicU64,
    /// LIST requests (pages).
    pub lists: AtomicU64,
}

/// A synchronous client of one replica location. Its methods block the calling thread on
/// the store's own runtime; do not call them from inside another async runtime.
pub struct Store {
    rt: tokio::runtime::Runtime,
    s3: Arc<AmazonS3>,
    prefix: String,
    location: String,
    traffic: Arc<Traffic>,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store")
            .field("location", &self.location)
            .finish_non_exhaustive()
    }
}

impl Store {
    /// A client of `target`. Makes no request: an unreachable endpoint is found by the first.
    pub fn connect(target: &Target) -> Result<Store, ReplicaError> {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("logbook-replica-io")
            .enable_all()
            .build()
            .map_err(|e| ReplicaError::local("tokio runtime", "start", e))?;
        let retry = RetryConfig {
            backoff: BackoffConfig {
                init_backoff: RETRY_BACKOFF_FIRST,
                max_backoff: RETRY_BACKOFF_MAX,
                base: 2.0,
            },
            max_retries: RETRIES_MAX,
            retry_timeout: REQUEST_RETRY_TIMEOUT,
        };
        let client = ClientOptions::new()
            .with_connect_timeout(CONNECT_TIMEOUT)
            .with_timeout(REQUEST_TIMEOUT)
            .with_allow_http(true);
        let mut b = AmazonS3Builder::new()
            .with_bucket_name(&target.bucket)
            .with_region(&target.region)
            .with_access_key_id(&target.access_key_id)
            .with_secret_access_key(&target.secret_access_key)
            .with_retry(retry)
            .with_client_options(client)
            // The replica checks a SHA-256 of every object itself; signing the payload would
            // hash every byte a second time.
            .with_unsigned_payload(true);
        if let Some(t) = &target.session_token {
            b = b.with_token(t);
        }
        if let Some(e) = &target.endpoint {
            b = b.with_endpoint(e).with_virtual_hosted_style_request(false);
        }
        let s3 = b.build().map_err(|e| ReplicaError::InvalidEndpoint {
            endpoint: target.endpoint.clone().unwrap_or_else(|| "AWS".to_owned()),
            reason: e.to_string(),
        })?;
        Ok(Store {
            rt,
            s3: Arc::new(s3),
            prefix: target.prefix.clone(),
            location: target.location(),
            traffic: Arc::default(),
        })
    }

    /// `s3://BUCKET/PREFIX`.
    pub fn location(&self) -> &str {
        &self.location
    }

    /// Requests made and bytes moved so far.
    pub fn traffic(&self) -> &Traffic {
        &self.traffic
    }

    fn key(&self, name: &str) -> Key {
        if self.prefix.is_empty() {
            Key::from(name)
        } else {
            Key::from(format!("{}/{name}", self.prefix))
        }
    }

    fn name_of(&self, key: &Key) -> String {
        let k = key.as_ref();
        if self.prefix.is_empty() {
            k.to_owned()
        } else {
            k.strip_prefix(&self.prefix)
                .and_then(|r| r.strip_prefix('/'))
                .unwrap_or(k)
                .to_owned()
        }
    }

    /// Runs `f` on the store's runtime and waits for it.
    pub(crate) fn block_on<F: Future>(&self, f: F) -> F::Output {
        self.rt.block_on(f)
    }

    /// A handle to spawn blocking work on (reading and hashing files beside the requests).
    pub(crate) fn handle(&self) -> &tokio::runtime::Handle {
        self.rt.handle()
    }

    /// Uploads `bytes` as `name` (below the prefix).
    pub async fn put_async(&self, name: &str, bytes: Bytes) -> Result<(), ReplicaError> {
        let len = bytes.len() as u64;
        self.s3
            .put(&self.key(name), PutPayload::from_bytes(bytes))
            .await
            .map_err(|e| store_error("PUT", name, &e))?;
        self.traffic.puts.fetch_add(1, Ordering::Relaxed);
        self.traffic.put_bytes.fetch_add(len, Ordering::Relaxed);
        Ok(())
    }

    /// Downloads object `name` whole; a missing one is [`ReplicaError::MissingObject`].
    pub async fn get_async(&self, name: &str) -> Result<Bytes, ReplicaError> {
        let got = async {
            let r = self.s3.get(&self.key(name)).await?;
            r.bytes().await
        }
        .await;
        match got {
            Ok(b) => {
                self.traffic.gets.fetch_add(1, Ordering::Relaxed);
                self.traffic
                    .get_bytes
                    .fetch_add(b.len() as u64, Ordering::Relaxed);
                Ok(b)
            }
            Err(object_store::Error::NotFound { .. }) => Err(ReplicaError::MissingObject {
                key: name.to_owned(),
            }),
            Err(e) => Err(store_error("GET", name, &e)),
        }
    }

    /// Uploads `bytes` as `name`.
    pub fn put(&self, name: &str, bytes: Bytes) -> Result<(), ReplicaError> {
        self.block_on(self.put_async(name, bytes))
    }

    /// Downloads object `name` whole.
    pub fn get(&self, name: &str) -> Result<Bytes, ReplicaError> {
        self.block_on(self.get_async(name))
    }

    /// Lists the objects whose names start with `under` (a folder, ending in `/`) and sort
    /// after `after`, in ascending order, stopping after `limit` of them (a LIST request
    /// returns up to 1,000; only the pages needed are asked for).
    pub fn list(
        &self,
        under: &str,
        after: Option<&str>,
        limit: Option<usize>,
    ) -> Result<Vec<Listed>, ReplicaError> {
        debug_assert!(under.ends_with('/'), "list a folder: {under}");
        let prefix = self.key(under.trim_end_matches('/'));
        let traffic = Arc::clone(&self.traffic);
        self.block_on(async {
            traffic.lists.fetch_add(1, Ordering::Relaxed);
            let stream = match after {
                Some(a) => self.s3.list_with_offset(Some(&prefix), &self.key(a)),
                None => self.s3.list(Some(&prefix)),
            };
            let stream = stream.map_ok(|m| Listed {
                name: self.name_of(&m.location),
                bytes: m.size,
            });
            let found: Vec<Listed> = match limit {
                Some(n) => stream.take(n).try_collect().await,
                None => stream.try_collect().await,
            }
            .map_err(|e| store_error("LIST", under, &e))?;
            // Pages past the first are counted roughly, at one per 1,000 keys.
            traffic
                .lists
                .fetch_add((found.len() / 1000) as u64, Ordering::Relaxed);
            Ok(found)
        })
    }
}

fn store_error(operation: &'static str, name: &str, e: &object_store::Error) -> ReplicaError {
    ReplicaError::Store {
        operation,
        key: name.to_owned(),
        message: e.to_string(),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn urls() {
        assert_eq!(
            parse_url("s3://my-bucket/a/b/").unwrap(),
            ("my-bucket".to_owned(), "a/b".to_owned())
        );
        assert_eq!(
            parse_url("s3://my-bucket").unwrap(),
            ("my-bucket".to_owned(), String::new())
        );
        for bad in [
            "my-bucket/x",
            "s3://",
            "s3://UPPER/x",
            "s3://ab/x",
            "s3://bucket/a//b",
            "s3://bucket/../x",
            "s3://bucket/sp ace",
            "https://bucket/x",
        ] {
            assert!(
                matches!(parse_url(bad), Err(ReplicaError::InvalidUrl { .. })),
                "{bad}"
            );
        }
    }

    #[test]
    fn endpoints() {
        for good in [
            "http://127.0.0.1:9000",
            "http://localhost:9000/",
            "http://[::1]:9000",
            "https://s3.example.com",
        ] {
            check_endpoint(good).unwrap();
        }
        for bad in [
            "http://10.0.0.1:9000",
            "http://s3.example.com",
            "ftp://127.0.0.1",
            "127.0.0.1:9000",
            "http://",
        ] {
            assert!(check_endpoint(bad).is_err(), "{bad}");
        }
    }
}
