//! One connection to an MCP server: started (a process of our own over stdio, or a streamable HTTP
//! session), its tools listed, calls made with a deadline, and ended.
//!
//! A stdio server is built by the task's jail like any command an agent runs (the sandbox mode,
//! the scrubbed environment plus what the config names), leads a process group of its own and is
//! written down in the daemon's process ledger. It is ended by closing its stdin, then SIGTERM to
//! the group, then SIGKILL, so whatever it started goes with it.

use super::config::{McpServerConfig, McpTransport};
use super::http::HttpClient;
use orchestrator_sandbox::{Jail, TrackedGroup};
use rmcp::ServiceExt;
use rmcp::model::{
    CallToolRequest, CallToolRequestParams, CallToolResult, CancelledNotification,
    CancelledNotificationParam, ClientNotification, ClientRequest, ServerResult,
};
use rmcp::service::{PeerRequestOptions, RoleClient, RunningService};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::async_rw::AsyncRwTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use serde_json::Value;
use std::path::Path;
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// Time a stdio server gets to exit once its stdin is closed, and again after SIGTERM.
const EXIT_GRACE: Duration = Duration::from_secs(2);

/// A tool as a server lists it.
#[derive(Debug, Clone, PartialEq)]
pub struct McpTool {
    /// The server's own name for it.
    pub name: String,
    pub description: String,
    pub input_schema: Value,
    /// The server says the tool changes nothing (`readOnlyHint`). Unannotated tools may write.
    pub read_only: bool,
}

/// The process of a stdio server.
#[derive(Debug)]
struct ServerProcess {
    child: tokio::process::Child,
    pgid: i32,
    _tracked: Option<TrackedGroup>,
    /// The end of what the server wrote on stderr, for the error of a server that fails.
    stderr: Arc<std::sync::Mutex<String>>,
    /// The task reading stderr; it ends when the pipe closes.
    stderr_reader: Option<tokio::task::JoinHandle<()>>,
    /// The command as the config names it, for the hint of a server the sandbox cannot find.
    program: String,
}

impl ServerProcess {
    /// `: <the end of stderr>`, or nothing when it wrote nothing.
    async fn said(&mut self) -> String {
        // A moment for a dying server's last words to arrive: its exit, then the reader's end
        // of the pipe (an exited process's last bytes may still be unread).
        let _ = tokio::time::timeout(Duration::from_millis(300), self.child.wait()).await;
        // A pipe still open after that is held by a process the server started; what arrived
        // so far is what is said.
        if let Some(reader) = self.stderr_reader.take() {
            let _ = tokio::time::timeout(Duration::from_millis(300), reader).await;
        }
        let text = self
            .stderr
            .lock()
            .map(|s| s.trim().to_owned())
            .unwrap_or_default();
        if text.is_empty() {
            String::new()
        } else {
            format!(
                " (its stderr: {text}){}",
                not_found_hint(&self.program, &text)
            )
        }
    }
}

/// What to do when the sandbox could not find the server's program (`PROGRAM: No such file or
/// directory`, or bubblewrap's `execvp PROGRAM: ...`): the sandbox shows its own view of the
/// machine, so a program on the person's PATH may not be there.
pub(crate) fn not_found_hint(program: &str, stderr: &str) -> String {
    if program.is_empty() || !stderr.contains(&format!("{program}: No such file or directory")) {
        return String::new();
    }
    let check = format!("`orchestrator sandbox -- {program} --help` shows what the sandbox finds");
    if Path::new(program).starts_with("/tmp") {
        format!(
            ". The sandbox has a /tmp of its own, into which a server's program and the files its \
             arguments name are bound by the paths the config gives; {program} is not there (a \
             link from it to elsewhere under /tmp is not followed): name the file itself, or \
             install the server outside /tmp"
        )
    } else if program.contains('/') {
        format!(
            ". {program} is not visible in the sandbox, which shows the system, the workspace and \
             the home's toolchains (~/.local/bin, ~/.cargo, ~/.npm, ...; `[sandbox] home_visible` \
             adds more) and hides the rest; {check}"
        )
    } else {
        format!(
            ". {program} is not on the sandbox's PATH: install it system-wide (npm install -g, \
             pip, apt) or into the home's ~/.local/bin, or name it by a path the sandbox shows; \
             {check}"
        )
    }
}

/// A connected server.
#[derive(Debug)]
pub struct McpClient {
    name: String,
    service: RunningService<RoleClient, ()>,
    process: tokio::sync::Mutex<Option<ServerProcess>>,
}

impl McpClient {
    /// Starts or reaches server `name`, initializes the session and lists its tools, all within
    /// the config's startup deadline. The error says what failed, in words for the person who
    /// wrote the config.
    pub async fn connect(
        name: &str,
        config: &McpServerConfig,
        jail: &Jail,
        workspace: &Path,
    ) -> Result<(McpClient, Vec<McpTool>), String> {
        let transport = config.validate(name)?;
        let deadline = config.startup_timeout();
        let (service, process) = match transport {
            McpTransport::Stdio => {
                let (mut process, stdout, stdin) = spawn(name, config, jail, workspace)?;
                let started = tokio::time::timeout(
                    deadline,
                    ().serve(AsyncRwTransport::new_client(stdout, stdin)),
                )
                .await;
                match started {
                    Ok(Ok(service)) => (service, Some(process)),
                    Ok(Err(e)) => {
                        let said = process.said().await;
                        crate::server_process::end_group(
                            &mut process.child,
                            process.pgid,
                            EXIT_GRACE,
                        )
                        .await;
                        return Err(format!("{name}: the server did not initialize: {e}{said}"));
                    }
                    Err(_) => {
                        let said = process.said().await;
                        crate::server_process::end_group(
                            &mut process.child,
                            process.pgid,
                            EXIT_GRACE,
                        )
                        .await;
                        return Err(format!("{}{said}", timed_out(name, deadline)));
                    }
                }
            }
            McpTransport::Http => {
                let url = config.url.clone().unwrap_or_default();
                let mut http = StreamableHttpClientTransportConfig::with_uri(url.clone());
                if let Some(var) = &config.bearer_token_env_var {
                    match std::env::var(var) {
                        Ok(token) if !token.trim().is_empty() => {
                            http = http.auth_header(token);
                        }
                        _ => {
                            return Err(format!(
                                "{name}: bearer_token_env_var names {var}, which is not set"
                            ));
                        }
                    }
                }
                let client = reqwest::Client::builder()
                    .build()
                    .map_err(|e| format!("{name}: cannot build an HTTP client: {e}"))?;
                let transport =
                    StreamableHttpClientTransport::with_client(HttpClient(client), http);
                match tokio::time::timeout(deadline, ().serve(transport)).await {
                    Ok(Ok(service)) => (service, None),
                    Ok(Err(e)) => {
                        return Err(format!("{name}: {url} did not initialize a session: {e}"));
                    }
                    Err(_) => return Err(timed_out(name, deadline)),
                }
            }
        };
        let client = McpClient {
            name: name.to_owned(),
            service,
            process: tokio::sync::Mutex::new(process),
        };
        match tokio::time::timeout(deadline, client.service.list_all_tools()).await {
            Ok(Ok(tools)) => {
                let tools = tools
                    .into_iter()
                    .map(|tool| McpTool {
                        name: tool.name.to_string(),
                        description: tool.description.as_deref().unwrap_or_default().to_owned(),
                        input_schema: Value::Object((*tool.input_schema).clone()),
                        read_only: tool
                            .annotations
                            .as_ref()
                            .and_then(|a| a.read_only_hint)
                            .unwrap_or(false),
                    })
                    .collect();
                Ok((client, tools))
            }
            Ok(Err(e)) => {
                client.shutdown().await;
                Err(format!("{name}: tools/list failed: {e}"))
            }
            Err(_) => {
                client.shutdown().await;
                Err(timed_out(name, deadline))
            }
        }
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// Calls `tool` with `arguments`. Past `timeout`, or when `cancel` fires, the call is given up
    /// and the server told so (`notifications/cancelled`).
    pub async fn call(
        &self,
        tool: &str,
        arguments: Value,
        timeout: Duration,
        cancel: &CancellationToken,
    ) -> Result<CallToolResult, String> {
        let arguments = match arguments {
            Value::Object(map) => Some(map),
            Value::Null => None,
            other => return Err(format!("arguments must be an object, not {other}")),
        };
        let mut params = CallToolRequestParams::new(tool.to_owned());
        params.arguments = arguments;
        let request = ClientRequest::CallToolRequest(CallToolRequest::new(params));
        let mut options = PeerRequestOptions::no_options();
        options.timeout = Some(timeout);
        let peer = self.service.peer().clone();
        let handle = peer
            .send_cancellable_request(request, options)
            .await
            .map_err(|e| format!("{}: the call could not be sent: {e}", self.name))?;
        let id = handle.id.clone();
        // Armed until the call has an answer: a call whose future is dropped (the attempt stopped,
        // the caller gave up) still tells the server to stop working on it.
        let mut guard = CancelOnDrop {
            peer: Some(peer.clone()),
            id: Some(id.clone()),
        };
        let answer = tokio::select! {
            answer = handle.await_response() => answer,
            () = cancel.cancelled() => {
                guard.disarm();
                send_cancel(&peer, id).await;
                return Err(format!("{}: the call was canceled", self.name));
            }
        };
        // A timeout is cancelled by rmcp itself; any other answer needs no notice.
        guard.disarm();
        match answer {
            Ok(ServerResult::CallToolResult(result)) => Ok(result),
            Ok(other) => Err(format!(
                "{}: answered tools/call with something else: {other:?}",
                self.name
            )),
            Err(rmcp::ServiceError::Timeout { .. }) => Err(format!(
                "{}: {tool} did not answer within {} s (tool_timeout_sec); the server was told to cancel it",
                self.name,
                timeout.as_secs_f64()
            )),
            Err(e) => Err(format!("{}: {tool} failed: {e}", self.name)),
        }
    }

    /// Whether the server offers resources and prompts (its `initialize` answer).
    pub fn offers(&self) -> (bool, bool) {
        self.service.peer_info().map_or((false, false), |info| {
            (
                info.capabilities.resources.is_some(),
                info.capabilities.prompts.is_some(),
            )
        })
    }

    /// The server's resources (every page), each as its JSON (`uri`, `name`, `mimeType`, ...).
    pub async fn resources(&self, timeout: Duration) -> Result<Vec<Value>, String> {
        let listed = tokio::time::timeout(timeout, self.service.list_all_resources())
            .await
            .map_err(|_| {
                format!(
                    "{}: resources/list did not answer within {} s",
                    self.name,
                    timeout.as_secs_f64()
                )
            })?
            .map_err(|e| format!("{}: resources/list failed: {e}", self.name))?;
        Ok(listed
            .iter()
            .filter_map(|r| serde_json::to_value(r).ok())
            .collect())
    }

    /// The contents of resource `uri`, as JSON (`text`, or a base64 `blob`, with `mimeType`).
    pub async fn read_resource(&self, uri: &str, timeout: Duration) -> Result<Vec<Value>, String> {
        let read = tokio::time::timeout(
            timeout,
            self.service
                .read_resource(rmcp::model::ReadResourceRequestParams::new(uri)),
        )
        .await
        .map_err(|_| {
            format!(
                "{}: resources/read did not answer within {} s",
                self.name,
                timeout.as_secs_f64()
            )
        })?
        .map_err(|e| format!("{}: resources/read {uri} failed: {e}", self.name))?;
        Ok(read
            .contents
            .iter()
            .filter_map(|c| serde_json::to_value(c).ok())
            .collect())
    }

    /// The server's prompts (every page), each as its JSON (`name`, `description`, `arguments`).
    pub async fn prompts(&self, timeout: Duration) -> Result<Vec<Value>, String> {
        let listed = tokio::time::timeout(timeout, self.service.list_all_prompts())
            .await
            .map_err(|_| {
                format!(
                    "{}: prompts/list did not answer within {} s",
                    self.name,
                    timeout.as_secs_f64()
                )
            })?
            .map_err(|e| format!("{}: prompts/list failed: {e}", self.name))?;
        Ok(listed
            .iter()
            .filter_map(|p| serde_json::to_value(p).ok())
            .collect())
    }

    /// Prompt `name` filled with `arguments`: its messages as JSON (`role`, `content`).
    pub async fn prompt(
        &self,
        name: &str,
        arguments: Option<serde_json::Map<String, Value>>,
        timeout: Duration,
    ) -> Result<Vec<Value>, String> {
        let mut params = rmcp::model::GetPromptRequestParams::new(name);
        params.arguments = arguments;
        let got = tokio::time::timeout(timeout, self.service.get_prompt(params))
            .await
            .map_err(|_| {
                format!(
                    "{}: prompts/get did not answer within {} s",
                    self.name,
                    timeout.as_secs_f64()
                )
            })?
            .map_err(|e| format!("{}: prompts/get {name} failed: {e}", self.name))?;
        Ok(got
            .messages
            .iter()
            .filter_map(|m| serde_json::to_value(m).ok())
            .collect())
    }

    /// Ends the session, and a stdio server's whole process group.
    pub async fn shutdown(&self) {
        // Stops the session's service, which closes a stdio server's stdin.
        self.service.cancellation_token().cancel();
        if let Some(mut process) = self.process.lock().await.take() {
            crate::server_process::end_group(&mut process.child, process.pgid, EXIT_GRACE).await;
        }
    }

    /// The process group of a stdio server.
    pub async fn pgid(&self) -> Option<i32> {
        self.process.lock().await.as_ref().map(|p| p.pgid)
    }
}

/// Sends `notifications/cancelled` for request `id`.
async fn send_cancel(peer: &rmcp::Peer<RoleClient>, id: rmcp::model::RequestId) {
    let notice = CancelledNotification::new(CancelledNotificationParam {
        request_id: id,
        reason: Some("canceled by the orchestrator".into()),
    });
    let _ = peer
        .send_notification(ClientNotification::CancelledNotification(notice))
        .await;
}

/// Tells the server a call is cancelled when the call's future is dropped before its answer.
struct CancelOnDrop {
    peer: Option<rmcp::Peer<RoleClient>>,
    id: Option<rmcp::model::RequestId>,
}

impl CancelOnDrop {
    fn disarm(&mut self) {
        self.peer = None;
        self.id = None;
    }
}

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        if let (Some(peer), Some(id)) = (self.peer.take(), self.id.take())
            && let Ok(runtime) = tokio::runtime::Handle::try_current()
        {
            runtime.spawn(async move { send_cancel(&peer, id).await });
        }
    }
}

fn timed_out(name: &str, deadline: Duration) -> String {
    format!(
        "{name}: not ready within {} s (startup_timeout_sec); a first `npx` download can take longer",
        deadline.as_secs_f64()
    )
}

type Pipes = (
    ServerProcess,
    tokio::process::ChildStdout,
    tokio::process::ChildStdin,
);

fn spawn(
    name: &str,
    config: &McpServerConfig,
    jail: &Jail,
    workspace: &Path,
) -> Result<Pipes, String> {
    let program = config.command.as_deref().unwrap_or_default();
    let cwd = config.cwd.as_deref().unwrap_or(workspace);
    let mut command = jail
        .server_command(program, &config.args, cwd)
        .map_err(|e| format!("{name}: {e}"))?;
    // What the config names on top of the jail's scrubbed environment: a person wrote it.
    for var in &config.env_vars {
        if let Ok(value) = std::env::var(var) {
            command.env(var, value);
        }
    }
    command.envs(&config.env);
    command
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let mut child = command
        .spawn()
        .map_err(|e| format!("{name}: cannot start {program}: {e}"))?;
    let pid = child.id().unwrap_or(0);
    let tracked = jail.track(pid);
    let (Some(stdout), Some(stdin)) = (child.stdout.take(), child.stdin.take()) else {
        return Err(format!("{name}: no pipes to the server"));
    };
    let stderr = Arc::new(std::sync::Mutex::new(String::new()));
    let mut stderr_reader = None;
    if let Some(pipe) = child.stderr.take() {
        let tail = stderr.clone();
        stderr_reader = Some(tokio::spawn(crate::server_process::keep_tail(pipe, tail)));
    }
    Ok((
        ServerProcess {
            child,
            pgid: pid as i32,
            _tracked: tracked,
            stderr,
            stderr_reader,
            program: program.to_owned(),
        },
        stdout,
        stdin,
    ))
}

#[cfg(test)]
mod tests {
    use super::not_found_hint;

    #[test]
    fn a_server_the_sandbox_cannot_find_gets_a_hint_for_where_it_is() {
        let said = "bwrap: execvp mcp-server-docs: No such file or directory";
        let on_path = not_found_hint("mcp-server-docs", said);
        assert!(on_path.contains("not on the sandbox's PATH"), "{on_path}");
        assert!(
            on_path.contains("orchestrator sandbox -- mcp-server-docs"),
            "{on_path}"
        );
        let in_tmp = not_found_hint(
            "/tmp/srv/server.py",
            "bwrap: execvp /tmp/srv/server.py: No such file or directory",
        );
        assert!(
            in_tmp.contains("bound by the paths the config gives"),
            "{in_tmp}"
        );
        let hidden = not_found_hint(
            "/home/ann/bin/srv",
            "bwrap: execvp /home/ann/bin/srv: No such file or directory",
        );
        assert!(hidden.contains("not visible in the sandbox"), "{hidden}");
        assert_eq!(not_found_hint("srv", "listening on stdio"), "");
        // As the sandbox's own launcher says it.
        let said = "srv: No such file or directory (os error 2)";
        assert!(not_found_hint("srv", said).contains("not on the sandbox's PATH"));
        // A file the server itself cannot find is not the server missing.
        assert_eq!(
            not_found_hint("srv", "config.json: No such file or directory"),
            ""
        );
    }
}
