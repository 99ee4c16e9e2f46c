//! `/console/`: the web console, a single-page application (`web-console/`, TypeScript and
//! Preact) whose Vite build, `web-console/dist/`, is committed and compiled into the binary, so
//! every node serves it and `cargo build` never needs npm (`make console` rebuilds it).
//!
//! The files are public: the page itself holds nothing secret, and it signs in with a client's
//! credentials at `/oauth/token` when the node has authentication on, calling the API with the
//! token like any other client. Vite names every asset after its content (`assets/index-3f2a.js`),
//! so those are cached for good; `index.html` is revalidated on each load (ETag), so a node that
//! was upgraded serves the new console at once. A path that is not a file is a route of the
//! application (`/console/topics/orders`): it gets `index.html`, which routes it in the browser.
//!
//! `index.html` says whether the node has authentication on (`<meta name="herald-auth">`), so
//! the page shows its sign-in form at once instead of learning it from a refused request.

use axum::extract::Path;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::get;
use axum::Router;

use crate::api::problem::ApiError;

/// Where the console is served.
pub const CONSOLE_PATH: &str = "/console/";

#[derive(rust_embed::Embed)]
#[folder = "../../web-console/dist/"]
struct ConsoleFiles;

/// The page runs only its own scripts and styles, talks only to the node it came from (REST and
/// the WebSocket), and may not be framed.
const CONTENT_SECURITY_POLICY: &str = "default-src 'self'; script-src 'self'; style-src 'self'; \
     img-src 'self' data:; connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; \
     form-action 'self'";

/// Content-hashed assets never change under their name.
const IMMUTABLE: &str = "public, max-age=31536000, immutable";
/// Everything else is revalidated on every use.
const REVALIDATE: &str = "no-cache";

/// The page's marker of authentication, as built (`web-console/index.html`).
const AUTH_OFF: &str = r#"<meta name="herald-auth" content="off" />"#;
const AUTH_ON: &str = r#"<meta name="herald-auth" content="on" />"#;

/// The console's routes; `auth_enabled` is the node's `[auth] enabled`.
pub fn router<S: Clone + Send + Sync + 'static>(auth_enabled: bool) -> Router<S> {
    Router::new()
        .route(
            "/console",
            get(|| async { Redirect::permanent(CONSOLE_PATH) }),
        )
        .route(
            CONSOLE_PATH,
            get(move |headers: HeaderMap| async move { index(&headers, auth_enabled) }),
        )
        .route(
            "/console/{*path}",
            get(
                move |Path(path): Path<String>, headers: HeaderMap| async move {
                    file(&path, &headers, auth_enabled)
                },
            ),
        )
}

fn index(headers: &HeaderMap, auth_enabled: bool) -> Response {
    serve("index.html", headers, auth_enabled).unwrap_or_else(missing_build)
}

fn file(path: &str, headers: &HeaderMap, auth_enabled: bool) -> Response {
    if let Some(response) = serve(path, headers, auth_enabled) {
        return response;
    }
    if is_file_path(path) {
        // A missing script or image must not get the HTML page: the browser would report a
        // confusing MIME error instead of the 404 it is.
        return ApiError::not_found(format!("no console file {path}")).into_response();
    }
    index(headers, auth_enabled)
}

/// Whether a path names a file (an asset, or anything with an extension) rather than a route of
/// the application.
fn is_file_path(path: &str) -> bool {
    path.starts_with("assets/")
        || path
            .rsplit('/')
            .next()
            .is_some_and(|name| name.contains('.'))
}

/// One embedded file with its type and caching headers; `None` when there is no such file.
fn serve(path: &str, request_headers: &HeaderMap, auth_enabled: bool) -> Option<Response> {
    let file = ConsoleFiles::get(path)?;
    let marked = auth_enabled && path == "index.html";
    let etag = format!(
        "\"{}{}\"",
        hex(&file.metadata.sha256_hash()[..16]),
        if marked { "-auth" } else { "" }
    );
    let cache = if path.starts_with("assets/") {
        IMMUTABLE
    } else {
        REVALIDATE
    };
    let mut headers = HeaderMap::new();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(content_type(path)),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static(cache));
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CONTENT_SECURITY_POLICY),
    );
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    if let Ok(value) = HeaderValue::from_str(&etag) {
        headers.insert(header::ETAG, value);
    }
    let unchanged = request_headers
        .get(header::IF_NONE_MATCH)
        .and_then(|value| value.to_str().ok())
        .is_some_and(|tags| tags.split(',').any(|tag| tag.trim() == etag));
    if unchanged {
        return Some((StatusCode::NOT_MODIFIED, headers).into_response());
    }
    let body = if marked {
        String::from_utf8_lossy(&file.data)
            .replacen(AUTH_OFF, AUTH_ON, 1)
            .into_bytes()
    } else {
        file.data.into_owned()
    };
    Some((headers, body).into_response())
}

/// The console was not built into this binary (`web-console/dist/` was empty when it was
/// compiled): say how to build it.
fn missing_build() -> Response {
    ApiError::not_found(
        "the web console is not built into this binary: run `make console`, then build again",
    )
    .into_response()
}

fn content_type(path: &str) -> &'static str {
    match path.rsplit('.').next().unwrap_or("") {
        "html" => "text/html; charset=utf-8",
        "js" | "mjs" => "text/javascript; charset=utf-8",
        "css" => "text/css; charset=utf-8",
        "json" | "map" => "application/json",
        "svg" => "image/svg+xml",
        "png" => "image/png",
        "ico" => "image/x-icon",
        "woff2" => "font/woff2",
        "txt" => "text/plain; charset=utf-8",
        _ => "application/octet-stream",
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|byte| format!("{byte:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::body::Body;
    use axum::http::Request;
    use tower::ServiceExt;

    async fn get(path: &str, if_none_match: Option<&str>) -> Response {
        get_from(false, path, if_none_match).await
    }

    async fn get_from(auth_enabled: bool, path: &str, if_none_match: Option<&str>) -> Response {
        let mut request = Request::get(path);
        if let Some(tag) = if_none_match {
            request = request.header(header::IF_NONE_MATCH, tag);
        }
        router::<()>(auth_enabled)
            .oneshot(request.body(Body::empty()).unwrap())
            .await
            .unwrap()
    }

    fn header_of(response: &Response, name: header::HeaderName) -> &str {
        response
            .headers()
            .get(name)
            .map(|value| value.to_str().unwrap())
            .unwrap_or("")
    }

    async fn text(response: Response) -> String {
        let bytes = axum::body::to_bytes(response.into_body(), usize::MAX)
            .await
            .unwrap();
        String::from_utf8(bytes.to_vec()).unwrap()
    }

    #[tokio::test]
    async fn the_page_is_revalidated_and_its_hashed_assets_are_cached_for_good() {
        let page = get("/console/", None).await;
        assert_eq!(page.status(), StatusCode::OK);
        assert_eq!(
            header_of(&page, header::CONTENT_TYPE),
            "text/html; charset=utf-8"
        );
        assert_eq!(header_of(&page, header::CACHE_CONTROL), "no-cache");
        let etag = header_of(&page, header::ETAG).to_string();
        let html = text(page).await;
        let script = html
            .split("src=\"/console/")
            .nth(1)
            .and_then(|rest| rest.split('"').next())
            .expect("index.html loads a script from /console/");
        assert!(script.starts_with("assets/") && script.ends_with(".js"));

        let asset = get(&format!("/console/{script}"), None).await;
        assert_eq!(asset.status(), StatusCode::OK);
        assert_eq!(
            header_of(&asset, header::CONTENT_TYPE),
            "text/javascript; charset=utf-8"
        );
        assert_eq!(header_of(&asset, header::CACHE_CONTROL), IMMUTABLE);

        let again = get("/console/", Some(&etag)).await;
        assert_eq!(again.status(), StatusCode::NOT_MODIFIED);
    }

    #[tokio::test]
    async fn client_routes_get_the_page_and_missing_files_get_404() {
        let route = get("/console/topics/orders", None).await;
        assert_eq!(route.status(), StatusCode::OK);
        assert!(text(route).await.contains("<div id=\"app\""));

        assert_eq!(
            get("/console/assets/gone-1234.js", None).await.status(),
            StatusCode::NOT_FOUND
        );
        assert_eq!(
            get("/console/favicon-missing.png", None).await.status(),
            StatusCode::NOT_FOUND
        );
        let redirect = get("/console", None).await;
        assert_eq!(redirect.status(), StatusCode::PERMANENT_REDIRECT);
        assert_eq!(header_of(&redirect, header::LOCATION), CONSOLE_PATH);
    }

    #[tokio::test]
    async fn the_page_says_whether_authentication_is_on() {
        let open = get_from(false, "/console/", None).await;
        let open_tag = header_of(&open, header::ETAG).to_string();
        assert!(text(open).await.contains(AUTH_OFF));
        let secured = get_from(true, "/console/groups", None).await;
        assert_ne!(header_of(&secured, header::ETAG), open_tag);
        let html = text(secured).await;
        assert!(html.contains(AUTH_ON) && !html.contains(AUTH_OFF));
    }
}
