//! The dashboard: pages rendered by the daemon (maud), one stylesheet and one small script, every
//! action a form that works without JavaScript.
//!
//! A person logs in with the API token (`/login`) and gets a session cookie; every page needs it
//! (else a redirect to `/login`), and every form carries the session's CSRF token, checked before
//! anything changes. The pages send a strict Content-Security-Policy (no inline script or style,
//! nothing from elsewhere). In read-only mode the forms are not shown and every write is refused
//! with 403, as in the API.

mod approvals;
mod automations;
mod best_of;
mod logs;
mod overview;
mod task_actions;
mod tasks;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use maud::{DOCTYPE, Markup, html};

use crate::Web;
use crate::session::{clear_cookie, same, set_cookie};

const CSS: &str = include_str!("../../assets/app.css");
const JS: &str = include_str!("../../assets/app.js");

/// What every page response carries: nothing may load from elsewhere or run inline, and no other
/// site may frame it.
const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; \
                   connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'";

/// The dashboard's routes, to merge into the daemon's router beside `/api/v1`.
pub fn router(web: Web) -> Router {
    let pages = Router::new()
        .route("/", get(tasks::list))
        .route("/overview", get(overview::page))
        .route(
            "/bulk",
            get(task_actions::confirm_bulk).post(task_actions::bulk),
        )
        .route("/tasks/{id}", get(tasks::read))
        .route("/tasks/{id}/{kind}/{key}/log", get(logs::view))
        .route(
            "/tasks/{id}/cancel",
            get(task_actions::confirm_cancel).post(task_actions::cancel),
        )
        .route(
            "/tasks/{id}/retry",
            get(task_actions::confirm_retry).post(task_actions::retry),
        )
        .route("/approvals", get(approvals::inbox))
        .route("/approvals/{id}/{decision}", post(approvals::decide))
        .route("/automations", get(automations::list))
        .route("/automations/{name}", get(automations::read))
        .route(
            "/automations/{name}/{action}",
            get(automations::confirm).post(automations::act),
        )
        .route("/logout", post(logout))
        .layer(axum::middleware::from_fn_with_state(web.clone(), signed_in));
    Router::new()
        .merge(pages)
        .route("/login", get(login_page).post(login))
        .route("/assets/app.css", get(css))
        .route("/assets/app.js", get(js))
        .route("/robots.txt", get(robots))
        .layer(axum::middleware::from_fn(same_origin))
        .layer(axum::middleware::from_fn(security_headers))
        .with_state(web)
}

/// A form posted from a page of another site is refused before anything else looks at it (the
/// login form too): see origin.rs.
async fn same_origin(request: Request, next: Next) -> Response {
    match crate::origin::cross_origin(request.method(), request.headers()) {
        Some(why) => page_error(StatusCode::FORBIDDEN, "Refused: another site", &why),
        None => next.run(request).await,
    }
}

/// Pages need a live session; a write also needs the session's CSRF token (checked by the page)
/// and a daemon that is not read-only.
async fn signed_in(State(web): State<Web>, request: Request, next: Next) -> Response {
    if web.sessions.csrf_of(request.headers()).is_none() {
        // After logging in, the person lands on the page they asked for.
        let asked = request.uri().path_and_query().map_or("/", |p| p.as_str());
        if request.method() == axum::http::Method::GET && asked != "/" {
            let next: String = form_urlencoded::byte_serialize(asked.as_bytes()).collect();
            return Redirect::to(&format!("/login?next={next}")).into_response();
        }
        return Redirect::to("/login").into_response();
    }
    if web.read_only
        && request.method() == axum::http::Method::POST
        && request.uri().path() != "/logout"
    {
        return page_error(
            StatusCode::FORBIDDEN,
            "Read-only",
            "This daemon serves its dashboard read-only; nothing was changed.",
        );
    }
    next.run(request).await
}

async fn security_headers(request: Request, next: Next) -> Response {
    let mut response = next.run(request).await;
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CSP),
    );
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    // `same-origin`, not `no-referrer`: under `no-referrer` a browser sends `Origin: null` with
    // a form's POST, which the Origin check (origin.rs) must refuse; `same-origin` still sends
    // no address to another site.
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("same-origin"),
    );
    response
}

/// What a page knows about who is looking.
pub(crate) struct Viewer {
    pub csrf: String,
    pub read_only: bool,
    pub pending: u64,
}

impl Viewer {
    pub(crate) async fn of(web: &Web, headers: &HeaderMap) -> Viewer {
        let pending = web.store.count_pending_approvals().await.unwrap_or(0);
        Viewer {
            csrf: web.sessions.csrf_of(headers).unwrap_or_default(),
            read_only: web.read_only,
            pending,
        }
    }

    /// The hidden field every form carries.
    pub(crate) fn csrf_field(&self) -> Markup {
        html! { input type="hidden" name="csrf" value=(self.csrf); }
    }
}

/// A whole page: navigation (with the pending approvals' count), the content, the script.
pub(crate) fn layout(viewer: &Viewer, title: &str, content: Markup) -> Response {
    let markup = html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { (title) " · orchestrator" }
                link rel="stylesheet" href="/assets/app.css";
            }
            body {
                header.top {
                    a.brand href="/" { "orchestrator" }
                    a href="/" { "Tasks" }
                    a href="/overview" { "Overview" }
                    a href="/approvals" {
                        "Approvals "
                        span.badge data-pending=(viewer.pending) hidden[viewer.pending == 0] { (viewer.pending) }
                    }
                    a href="/automations" { "Automations" }
                    @if viewer.read_only { span.muted { "read-only" } }
                    form method="post" action="/logout" { (viewer.csrf_field()) button type="submit" { "Log out" } }
                }
                main { (content) }
                script src="/assets/app.js" {}
            }
        }
    };
    html_response(StatusCode::OK, markup)
}

/// The page as sent. maud escapes HTML in what the pages show, not the characters that act on
/// how text reads (a bidi override shows `rm -rf /` reversed, an ESC or a zero-width space hides
/// itself), so the whole page goes through [`orchestrator_types::visible`]: every such character
/// from a task, an approval or GitHub is shown as an escape (`\u{202e}`). The pages' own markup
/// holds none, and the escapes are plain ASCII that needs no HTML escaping.
fn html_response(status: StatusCode, markup: Markup) -> Response {
    let page = markup.into_string();
    let page = orchestrator_types::visible(&page).into_owned();
    (
        status,
        [(header::CONTENT_TYPE, "text/html; charset=utf-8")],
        page,
    )
        .into_response()
}

/// A page that says what went wrong, for people.
pub(crate) fn page_error(status: StatusCode, title: &str, message: &str) -> Response {
    html_response(
        status,
        html! {
            (DOCTYPE)
            html lang="en" {
                head { meta charset="utf-8"; title { (title) } link rel="stylesheet" href="/assets/app.css"; }
                body { main { h1 { (title) } p.error { (message) } p { a href="/" { "Back to the tasks" } } } }
            }
        },
    )
}

/// A store error as a page.
pub(crate) fn store_error(e: orchestrator_store::Error) -> Response {
    let api = crate::ApiError::from(e);
    page_error(api.status, "Something went wrong", &api.message)
}

/// A refusal page, returned by the checks a handler makes before it acts.
pub(crate) struct Refused(Box<Response>);

impl IntoResponse for Refused {
    fn into_response(self) -> Response {
        *self.0
    }
}

impl From<Response> for Refused {
    fn from(response: Response) -> Refused {
        Refused(Box::new(response))
    }
}

/// The fields of a posted form, after checking its CSRF token against the session's.
pub(crate) fn form(
    web: &Web,
    headers: &HeaderMap,
    body: &Bytes,
) -> Result<Vec<(String, String)>, Refused> {
    let fields: Vec<(String, String)> = form_urlencoded::parse(body)
        .map(|(k, v)| (k.into_owned(), v.into_owned()))
        .collect();
    let presented = fields
        .iter()
        .find(|(k, _)| k == "csrf")
        .map(|(_, v)| v.as_str())
        .unwrap_or_default();
    match web.sessions.csrf_of(headers) {
        Some(expected) if same(presented, &expected) => Ok(fields),
        _ => Err(page_error(
            StatusCode::FORBIDDEN,
            "Refused",
            "The form's security token is missing or stale; reload the page and try again. Nothing was changed.",
        )
        .into()),
    }
}

pub(crate) fn field<'a>(fields: &'a [(String, String)], name: &str) -> Option<&'a str> {
    fields
        .iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.as_str())
        .filter(|v| !v.trim().is_empty())
}

#[derive(serde::Deserialize)]
pub(crate) struct LoginQuery {
    once: Option<String>,
    /// The page to land on after logging in.
    next: Option<String>,
}

/// Where to go after logging in: `next` when it is a page of this site (a path, never another
/// host), else the tasks list.
fn landing(next: Option<&str>) -> &str {
    match next {
        Some(path)
            if path.starts_with('/')
                && !path.starts_with("//")
                && !path.contains('\\')
                && !path.chars().any(char::is_control)
                && !path.starts_with("/login") =>
        {
            path
        }
        _ => "/",
    }
}

async fn login_page(
    State(web): State<Web>,
    headers: HeaderMap,
    query: Result<axum::extract::Query<LoginQuery>, axum::extract::rejection::QueryRejection>,
) -> Response {
    let query = query.ok().map(|q| q.0);
    let next = query.as_ref().and_then(|q| q.next.clone());
    let next = landing(next.as_deref()).to_owned();
    // A one-time link from `serve`: spent here, whoever follows it first.
    if let Some(code) = query.and_then(|q| q.once) {
        if !web.sessions.spend_code(&code) {
            return login_form(
                StatusCode::UNAUTHORIZED,
                Some("That link was used already, or is too old; log in with the token."),
                &next,
            );
        }
        return signed_in_response(&web, &next);
    }
    if web.sessions.csrf_of(&headers).is_some() {
        return Redirect::to(&next).into_response();
    }
    login_form(StatusCode::OK, None, &next)
}

/// A new session's cookie, and the page asked for (the tasks list by default).
fn signed_in_response(web: &Web, next: &str) -> Response {
    let id = web.sessions.start();
    (
        StatusCode::SEE_OTHER,
        [
            (header::LOCATION, landing(Some(next)).to_owned()),
            (header::SET_COOKIE, set_cookie(&id)),
        ],
    )
        .into_response()
}

fn login_form(status: StatusCode, error: Option<&str>, next: &str) -> Response {
    html_response(
        status,
        html! {
            (DOCTYPE)
            html lang="en" {
                head { meta charset="utf-8"; title { "Log in · orchestrator" } link rel="stylesheet" href="/assets/app.css"; }
                body { main {
                    h1 { "Log in" }
                    @if let Some(error) = error { p.error { (error) } }
                    p.muted { "The token is in the api-token file of the daemon's home directory." }
                    form method="post" action="/login" {
                        input type="hidden" name="next" value=(next);
                        input type="password" name="token" autocomplete="current-password" placeholder="API token" required;
                        " "
                        button type="submit" { "Log in" }
                    }
                } }
            }
        },
    )
}

async fn login(State(web): State<Web>, body: Bytes) -> Response {
    let field = |name: &str| {
        form_urlencoded::parse(&body)
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.trim().to_owned())
    };
    let token = field("token").unwrap_or_default();
    let next = field("next");
    let next = landing(next.as_deref());
    if token.is_empty() {
        return login_form(
            StatusCode::UNAUTHORIZED,
            Some("Give the daemon's token: it is in the api-token file of its home directory."),
            next,
        );
    }
    if !same(&token, &web.token) {
        return login_form(
            StatusCode::UNAUTHORIZED,
            Some("That is not the daemon's token."),
            next,
        );
    }
    signed_in_response(&web, next)
}

async fn logout(State(web): State<Web>, headers: HeaderMap, body: Bytes) -> Response {
    if let Err(refused) = form(&web, &headers, &body) {
        return refused.into_response();
    }
    web.sessions.end(&headers);
    (
        StatusCode::SEE_OTHER,
        [
            (header::LOCATION, "/login".to_owned()),
            (header::SET_COOKIE, clear_cookie()),
        ],
    )
        .into_response()
}

async fn css() -> Response {
    (
        [
            (header::CONTENT_TYPE, "text/css; charset=utf-8"),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        CSS,
    )
        .into_response()
}

async fn js() -> Response {
    (
        [
            (header::CONTENT_TYPE, "text/javascript; charset=utf-8"),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        JS,
    )
        .into_response()
}

async fn robots() -> &'static str {
    "User-agent: *\nDisallow: /\n"
}

/// A time in Unix milliseconds as people read it: how long ago (or how soon) it is, with the exact
/// UTC time on hover. The page's script adds the reader's local time of day and keeps the relative
/// part current; without it the page still says both.
pub(crate) fn time(ms: i64) -> Markup {
    let exact = chrono::DateTime::from_timestamp_millis(ms)
        .map(|t| t.format("%Y-%m-%d %H:%M:%S UTC").to_string())
        .unwrap_or_else(|| orchestrator_types::format_millis(ms));
    html! {
        time datetime=(orchestrator_types::format_millis(ms)) title=(exact) data-at=(ms) {
            (orchestrator_types::format_relative(ms, orchestrator_types::now_millis()))
        }
    }
}

/// What an approval asks for, in short: the question, the command a call would run, or the tool
/// and its arguments.
pub(crate) fn asked(approval: &orchestrator_store::Approval) -> String {
    if approval.kind == orchestrator_store::approval_kind::QUESTION {
        return format!("an answer: {}", clip(&approval.reason, 120));
    }
    match command_of(&approval.arguments) {
        Some(command) => format!("approval of {} `{}`", approval.tool, clip(command, 120)),
        None => format!("approval of {}", approval.tool),
    }
}

/// The command a call asks to run (exec_shell, job_start and the like), when it has one.
pub(crate) fn command_of(arguments: &serde_json::Value) -> Option<&str> {
    ["command", "cmd"]
        .iter()
        .find_map(|key| arguments.get(*key).and_then(|v| v.as_str()))
}

fn clip(text: &str, max: usize) -> String {
    let line = text.lines().next().unwrap_or("");
    if line.chars().count() <= max && line.len() == text.len() {
        line.to_owned()
    } else {
        let mut s: String = line.chars().take(max.saturating_sub(1)).collect();
        s.push('…');
        s
    }
}

/// A duration as people read it: `850 ms`, `3.1 s`, `4 min 05 s`.
pub(crate) fn duration(ms: i64) -> String {
    orchestrator_types::format_duration(ms)
}
