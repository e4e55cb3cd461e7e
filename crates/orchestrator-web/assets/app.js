// The dashboard's only script: live updates over Server-Sent Events, loaded as a file so a strict
// Content-Security-Policy (no inline script) holds. Every page works without it.
(function () {
  "use strict";
  // What a model or a stranger wrote, with the characters that reorder or hide text (bidi
  // controls, other format characters) and control characters written out as escapes, as the
  // daemon's own pages show them (orchestrator-types' `visible`); newlines, tabs and the
  // zero-width joiner of emoji stay.
  var visible = function (text) {
    return String(text).replace(/[\p{Cc}\p{Cf}]/gu, function (c) {
      if (c === "\n" || c === "\t" || c === "\u200d") { return c; }
      var code = c.codePointAt(0);
      return code < 0x80
        ? "\\x" + ("0" + code.toString(16)).slice(-2)
        : "\\u{" + code.toString(16) + "}";
    });
  };
  // Times: the page says how long ago, with the exact UTC time on hover; here each also gets the
  // reader's local time of day (or date, when not today), and the "ago" part is kept current.
  var relative = function (at, now) {
    var delta = now - at;
    var secs = Math.floor(Math.abs(delta) / 1000);
    var amount;
    if (secs < 5) { return "just now"; }
    if (secs < 60) { amount = secs + " s"; }
    else if (secs < 3600) { amount = Math.floor(secs / 60) + " min"; }
    else if (secs < 86400) { amount = Math.floor(secs / 3600) + " h"; }
    else if (secs < 172800) { amount = "1 day"; }
    else { amount = Math.floor(secs / 86400) + " days"; }
    return delta >= 0 ? amount + " ago" : "in " + amount;
  };
  var locales = (navigator.languages && navigator.languages.length) ? navigator.languages.slice() : [];
  var localText = function (at) {
    var date = new Date(at);
    var today = new Date();
    // The person's languages, in their order (what the browser sends as Accept-Language), so a
    // 24-hour clock shows where theirs is one; the runtime's default may be another locale.
    var clock = date.toLocaleTimeString(locales, { hour: "2-digit", minute: "2-digit", second: "2-digit" });
    return date.toDateString() === today.toDateString()
      ? clock
      : date.toLocaleDateString(locales, { year: "numeric", month: "short", day: "numeric" }) + " " + clock;
  };
  var showTime = function (element) {
    var at = Number(element.getAttribute("data-at"));
    if (!isFinite(at)) { return; }
    element.textContent = localText(at) + " · " + relative(at, Date.now());
    if (!element.title) {
      element.title = new Date(at).toISOString().replace("T", " ").replace(/\.\d+Z$/, " UTC");
    }
  };
  // `at` as the API sends it (RFC 3339) or in Unix milliseconds.
  var timeElement = function (at) {
    var ms = typeof at === "number" ? at : Date.parse(at);
    var element = document.createElement("time");
    element.setAttribute("data-at", String(ms));
    element.setAttribute("datetime", new Date(ms).toISOString());
    showTime(element);
    return element;
  };
  var showTimes = function () {
    document.querySelectorAll("time[data-at]").forEach(showTime);
  };
  showTimes();
  window.setInterval(showTimes, 30000);
  // Logs (the log view and the task page's gate panels): numbered lines, each a link to itself,
  // in the colours the output's SGR sequences ask for (as classes: the rule of orchestrator-types'
  // `styled`); other escape sequences are dropped and other control characters written out.
  var applySgr = function (style, params) {
    var codes = params === "" ? [0] : params.split(";").map(function (p) { return Number(p) || 0; });
    for (var i = 0; i < codes.length; i++) {
      var c = codes[i];
      if (c === 0) { style = {}; }
      else if (c === 1) { style.b = true; } else if (c === 2) { style.dim = true; }
      else if (c === 3) { style.i = true; } else if (c === 4) { style.u = true; }
      else if (c === 22) { style.b = false; style.dim = false; }
      else if (c === 23) { style.i = false; } else if (c === 24) { style.u = false; }
      else if (c >= 30 && c <= 37) { style.fg = c - 30; } else if (c >= 90 && c <= 97) { style.fg = c - 82; }
      else if (c === 39) { style.fg = null; }
      else if (c >= 40 && c <= 47) { style.bg = c - 40; } else if (c >= 100 && c <= 107) { style.bg = c - 92; }
      else if (c === 49) { style.bg = null; }
      else if (c === 38 || c === 48) {
        var basic = null;
        if (codes[i + 1] === 5) { basic = codes[i + 2] < 16 ? codes[i + 2] : null; i += 2; }
        else if (codes[i + 1] === 2) { i += 4; }
        if (c === 38) { style.fg = basic; } else { style.bg = basic; }
      }
    }
    return style;
  };
  var copyStyle = function (style) { return Object.assign({}, style); };
  var styleClass = function (style) {
    var names = [];
    if (style.fg !== null && style.fg !== undefined) { names.push("fg-" + style.fg); }
    if (style.bg !== null && style.bg !== undefined) { names.push("bg-" + style.bg); }
    ["b", "dim", "i", "u"].forEach(function (name) { if (style[name]) { names.push(name); } });
    return names.join(" ");
  };
  // ESC [ params m (kept as a style), other CSI sequences, OSC up to BEL or ESC \, other ESC x.
  var escapes = /\x1b(?:\[([0-9;]*)m|\[[\x20-\x3f]*[\x40-\x7e]|\][^\x07\x1b]*(?:\x07|\x1b\\)|[\x20-\x7e]?)/g;
  // Fills `into` with the runs of one line; returns the style the line ends with.
  var renderLine = function (into, text, style) {
    style = copyStyle(style);
    var last = 0;
    var push = function (chunk) {
      if (!chunk) { return; }
      var cls = styleClass(style);
      if (cls) {
        var span = document.createElement("span");
        span.className = cls;
        span.textContent = visible(chunk);
        into.appendChild(span);
      } else {
        into.appendChild(document.createTextNode(visible(chunk)));
      }
    };
    text.replace(escapes, function (match, params, offset) {
      push(text.slice(last, offset));
      last = offset + match.length;
      if (params !== undefined) { style = applySgr(style, params); }
      return match;
    });
    push(text.slice(last));
    return style;
  };
  // A terminal's line as its screen ends it: the \r of \r\n gone, and a carriage return starts
  // the line again (the rule of the log view page's `screen_line`).
  var screenLine = function (line) {
    line = line.replace(/\r+$/, "");
    var cr = line.lastIndexOf("\r");
    return cr >= 0 ? line.slice(cr + 1) : line;
  };
  var LogView = function (view) {
    this.view = view;
    this.terminal = view.getAttribute("data-terminal") === "true";
    this.lines = Number(view.getAttribute("data-lines")) || 0;
    this.partial = "";
    this.partialLine = null;
    this.style = {};
    this.query = "";
    this.onLine = null;
  };
  LogView.prototype.makeLine = function (number) {
    var line = document.createElement("div");
    line.className = "line";
    line.id = "L" + number;
    line.setAttribute("data-line", String(number));
    var link = document.createElement("a");
    link.className = "ln";
    link.href = "#L" + number;
    link.textContent = String(number);
    var text = document.createElement("span");
    text.className = "text";
    line.appendChild(link);
    line.appendChild(text);
    return line;
  };
  LogView.prototype.append = function (text) {
    var parts = (this.partial + text).split("\n");
    this.partial = parts.pop();
    var self = this;
    var scroller = this.view.classList.contains("log-tail") ? this.view : document.scrollingElement;
    var atEnd = scroller.scrollHeight - scroller.scrollTop - scroller.clientHeight < 40;
    parts.forEach(function (whole) {
      var line = self.partialLine || self.makeLine(self.lines + 1);
      self.partialLine = null;
      var into = line.querySelector(".text");
      into.textContent = "";
      self.style = renderLine(into, self.terminal ? screenLine(whole) : whole, self.style);
      self.lines += 1;
      if (!line.parentNode) { self.view.appendChild(line); }
      if (self.onLine) { self.onLine(line); }
    });
    if (this.partial) {
      if (!this.partialLine) {
        this.partialLine = this.makeLine(this.lines + 1);
        this.view.appendChild(this.partialLine);
      }
      var into = this.partialLine.querySelector(".text");
      into.textContent = "";
      renderLine(into, this.terminal ? screenLine(this.partial) : this.partial, this.style);
    }
    this.view.setAttribute("data-lines", String(this.lines));
    if (this.following && atEnd) { scroller.scrollTop = scroller.scrollHeight; }
  };
  // Follows the log's stream from the offset the page ends at; `done(end)` gets the end's data.
  LogView.prototype.follow = function (status, done) {
    var self = this;
    if (this.source) { return; }
    this.following = true;
    var next = this.view.getAttribute("data-next") || "0";
    var source = new EventSource(this.view.getAttribute("data-stream") + "?after=" + next);
    this.source = source;
    source.addEventListener("log", function (event) {
      var piece;
      try { piece = JSON.parse(event.data); } catch (e) { return; }
      self.view.setAttribute("data-next", String(piece.next));
      var bytes = document.querySelector(".log-page [data-log-bytes]");
      if (bytes && self.view.closest(".log-page")) { bytes.textContent = String(piece.total_bytes); }
      self.append(piece.text);
      if (status) { status.textContent = "following"; }
    });
    source.addEventListener("end", function (event) {
      source.close();
      self.source = null;
      self.following = false;
      if (self.partial) { self.append("\n"); }
      var end = {};
      try { end = JSON.parse(event.data); } catch (e) { end = {}; }
      if (done) { done(end); }
    });
    source.addEventListener("error", function () {
      if (status && self.source) { status.textContent = "reconnecting"; }
    });
  };
  LogView.prototype.stop = function () {
    if (this.source) { this.source.close(); this.source = null; }
    this.following = false;
  };
  // How a log ended, in words: a gate's verdict, a job's status, a terminal's exit, or why it
  // was abandoned.
  var verdictText = function (end) {
    if (end.verdict) { return end.verdict + (end.summary ? ": " + end.summary : ""); }
    if (end.job_status && end.state !== "abandoned") {
      return end.job_status + (end.exit_code !== null && end.exit_code !== undefined ? " (exit " + end.exit_code + ")" : "");
    }
    if (end.end_reason) { return (end.state || "ended") + ": " + end.end_reason; }
    return end.state || "ended";
  };
  // The log view page: search, follow.
  var logView = document.querySelector(".log-page [data-log-view]");
  if (logView) {
    var view = new LogView(logView);
    var search = document.querySelector("[data-log-search]");
    var matchesLabel = document.querySelector("[data-log-matches]");
    var prev = document.querySelector("[data-log-prev]");
    var nextButton = document.querySelector("[data-log-next]");
    var matches = [];
    var current = -1;
    var show = function (index) {
      if (matches.length === 0) { return; }
      if (current >= 0 && matches[current]) { matches[current].classList.remove("current"); }
      current = (index + matches.length) % matches.length;
      matches[current].classList.add("current");
      matches[current].scrollIntoView({ block: "center" });
      matchesLabel.textContent = (current + 1) + " of " + matches.length;
    };
    var matchesQuery = function (line) {
      var text = line.querySelector(".text").textContent.toLowerCase();
      return view.query !== "" && text.indexOf(view.query) >= 0;
    };
    var runSearch = function () {
      view.query = search.value.toLowerCase();
      matches.forEach(function (line) { line.classList.remove("match", "current"); });
      matches = [];
      current = -1;
      if (view.query !== "") {
        logView.querySelectorAll(".line").forEach(function (line) {
          if (matchesQuery(line)) { line.classList.add("match"); matches.push(line); }
        });
      }
      prev.hidden = nextButton.hidden = matches.length === 0;
      matchesLabel.textContent = view.query === "" ? "" : matches.length === 0 ? "no line matches" : matches.length + " lines match";
      if (matches.length > 0) { show(0); }
    };
    view.onLine = function (line) {
      if (matchesQuery(line)) {
        line.classList.add("match");
        matches.push(line);
        prev.hidden = nextButton.hidden = false;
        matchesLabel.textContent = (current + 1) + " of " + matches.length;
      }
    };
    search.addEventListener("input", runSearch);
    search.addEventListener("keydown", function (event) {
      if (event.key === "Enter") { event.preventDefault(); show(event.shiftKey ? current - 1 : current + 1); }
    });
    prev.addEventListener("click", function () { show(current - 1); });
    nextButton.addEventListener("click", function () { show(current + 1); });
    var failure = document.querySelector("[data-log-failure]");
    var markTarget = function () {
      document.querySelectorAll(".line.target").forEach(function (line) { line.classList.remove("target"); });
      var target = location.hash && document.getElementById(location.hash.slice(1));
      if (target) { target.classList.add("target"); }
    };
    window.addEventListener("hashchange", markTarget);
    markTarget();
    if (failure) { failure.addEventListener("click", function () { setTimeout(markTarget, 0); }); }
    var followButton = document.querySelector("[data-log-follow]");
    var logStatus = document.querySelector("[data-log-status]");
    var state = document.querySelector("[data-log-state]");
    if (followButton && logView.getAttribute("data-live") === "true") {
      followButton.hidden = false;
      var ended = function (end) {
        followButton.hidden = true;
        if (state) { state.textContent = end.state || "finished"; state.setAttribute("data-log-state", end.state || "finished"); }
        if (logStatus) {
          logStatus.textContent = verdictText(end);
          logStatus.setAttribute("data-log-verdict", end.verdict || end.state || "");
        }
      };
      var start = function () {
        view.follow(logStatus, ended);
        followButton.textContent = "Stop following";
        followButton.setAttribute("data-following", "true");
        if (logStatus) { logStatus.textContent = "following"; }
      };
      followButton.addEventListener("click", function () {
        if (view.source) {
          view.stop();
          followButton.textContent = "Follow";
          followButton.setAttribute("data-following", "false");
          if (logStatus) { logStatus.textContent = "paused"; }
        } else {
          start();
        }
      });
      start();
    }
  }
  // The task page's gate panels: each follows its gate's output until the gate ends.
  var panels = document.querySelector("[data-gate-panels]");
  var followPanel = function (panel) {
    var view = new LogView(panel.querySelector("[data-log-view]"));
    var status = panel.querySelector("[data-gate-status]");
    view.follow(null, function (end) {
      if (status) {
        status.textContent = verdictText(end);
        status.setAttribute("data-gate-verdict", end.verdict || (end.state === "finished" && end.job_status) || end.state || "");
        status.className = "verdict-" + (end.verdict || "none");
      }
    });
  };
  // A panel that follows one running command's output: `path` is gates/N, jobs/N,
  // terminals/pty-N or background-jobs/job-N, `title` what it is ("Gate", "Shell job 3",
  // "Terminal pty-2", "Background job job-4").
  var makePanel = function (into, task, path, title, name) {
    if (!into || into.querySelector('[data-log-panel="' + path + '"]')) { return; }
    var panel = document.createElement("div");
    panel.className = "card gate-panel";
    panel.setAttribute("data-log-panel", path);
    if (path.indexOf("gates/") === 0) { panel.setAttribute("data-gate-panel", path.slice(6)); }
    var head = document.createElement("p");
    head.appendChild(document.createTextNode(title + " "));
    var link = document.createElement("a");
    link.href = "/tasks/" + task + "/" + path + "/log";
    link.textContent = visible(name);
    head.appendChild(link);
    head.appendChild(document.createTextNode(" "));
    var status = document.createElement("span");
    status.className = "live";
    status.setAttribute("data-gate-status", "");
    status.textContent = "running";
    head.appendChild(status);
    var log = document.createElement("div");
    log.className = "log log-tail";
    log.setAttribute("data-log-view", "");
    log.setAttribute("data-stream", "/api/v1/tasks/" + task + "/" + path + "/log/stream");
    log.setAttribute("data-next", "0");
    log.setAttribute("data-lines", "0");
    if (path.indexOf("terminals/") === 0) { log.setAttribute("data-terminal", "true"); }
    panel.appendChild(head);
    panel.appendChild(log);
    into.appendChild(panel);
    followPanel(panel);
  };
  var openPanel = function (position, name) {
    if (!panels) { return; }
    makePanel(panels, panels.getAttribute("data-gate-panels"), "gates/" + position, "Gate", name);
  };
  if (panels && panels.getAttribute("data-live") === "true") {
    panels.querySelectorAll("[data-gate-panel]").forEach(followPanel);
  }
  // Shell jobs, terminals and background jobs: the page's running ones are followed; after each
  // tool call the task's logs are read again and one that started since gets a panel.
  var commandPanels = document.querySelector("[data-log-panels]");
  if (commandPanels && commandPanels.getAttribute("data-live") === "true") {
    commandPanels.querySelectorAll("[data-log-panel]").forEach(followPanel);
  }
  var lookForCommands = function () {
    if (!commandPanels) { return; }
    var task = commandPanels.getAttribute("data-log-panels");
    fetch("/api/v1/tasks/" + task + "/logs", { credentials: "same-origin" })
      .then(function (response) { return response.ok ? response.json() : { logs: [] }; })
      .then(function (body) {
        (body.logs || []).forEach(function (entry) {
          if (entry.kind === "gate" || entry.state !== "running") { return; }
          var kinds = {
            terminal: ["terminals/", "Terminal "],
            background_job: ["background-jobs/", "Background job "],
            shell_job: ["jobs/", "Shell job "]
          };
          var kind = kinds[entry.kind];
          if (!kind) { return; }
          var path = kind[0] + entry.key;
          var title = kind[1] + entry.key;
          makePanel(commandPanels, task, path, title, String(entry.name));
          var none = document.querySelector("[data-no-commands]");
          if (none) { none.hidden = true; }
        });
      })
      .catch(function () {});
  };
  // A task page while the task runs: new events are appended to the timeline as they arrive, and
  // the state in the header follows them; at the end the stream closes and the header shows the
  // final state (gates and evidence appear on the next load).
  var timeline = document.querySelector("[data-task-events]");
  if (timeline && timeline.getAttribute("data-live") === "true") {
    var url = timeline.getAttribute("data-task-events");
    var source = new EventSource(url);
    var status = document.querySelector("[data-live-status]");
    if (status) { status.textContent = "live"; }
    var state = document.querySelector("[data-state]");
    var showState = function (name) {
      if (!state || !name) { return; }
      state.setAttribute("data-state", name);
      state.className = "state state-" + name;
      state.textContent = name;
    };
    // The state an event's kind leaves the task in, where it says.
    var stateAfter = { claimed: "running", waiting: "waiting", approval_decided: "queued",
      requeued: "queued", handed_back: "queued", rescued: "queued", retried: "queued",
      succeeded: "succeeded", failed: "failed", canceled: "canceled" };
    source.addEventListener("end", function (event) {
      source.close();
      showState(event.data);
      if (status) { status.textContent = "finished"; }
      // A finished task is no longer canceled.
      document.querySelectorAll('[data-action="cancel"]').forEach(function (link) { link.remove(); });
    });
    source.onmessage = null;
    // A shell job or a terminal starts with a tool call: look for new ones after each.
    source.addEventListener("tool_call", lookForCommands);
    // A gate that starts gets a panel with its output as it prints.
    source.addEventListener("gate_started", function (event) {
      var data;
      try { data = JSON.parse(event.data); } catch (e) { return; }
      if (data && data.data) { openPanel(data.data.position, String(data.data.gate)); }
    });
    source.addEventListener("error", function () {
      if (status) { status.textContent = "reconnecting"; }
    });
    var append = function (event) {
      var data;
      try { data = JSON.parse(event.data); } catch (e) { return; }
      if (document.getElementById("event-" + data.seq)) { return; }
      // Each attempt starts with its claim, under a row that names it (as the page renders it).
      if (data.kind === "claimed") {
        var attempt = String((data.data && data.data.attempt) || "");
        var header = document.createElement("tr");
        header.className = "attempt";
        // A wait for a person does not spend the attempt: it goes on.
        var resumed = timeline.querySelector('tr.attempt[data-attempt="' + attempt + '"]') !== null;
        header.setAttribute("data-attempt", attempt);
        // The header names the attempt that runs now; the error of the one before is not its.
        document.querySelectorAll("[data-attempt-now]").forEach(function (now) { now.textContent = attempt; });
        if (!resumed) {
          document.querySelectorAll("p.muted[data-last-error]").forEach(function (stale) { stale.remove(); });
        }
        var title = document.createElement("td");
        title.colSpan = 4;
        title.textContent = "Attempt " + attempt + (resumed ? ", resumed" : "");
        header.appendChild(title);
        timeline.appendChild(header);
      }
      var row = document.createElement("tr");
      row.id = "event-" + data.seq;
      row.setAttribute("data-tone", data.tone || "info");
      var cells = [String(data.seq), null, data.kind, data.text || (data.kind + " " + JSON.stringify(data.data))];
      cells.forEach(function (text, i) {
        var cell = document.createElement("td");
        if (i === 1) {
          cell.className = "muted";
          cell.appendChild(timeElement(data.at));
        } else {
          if (i === 2) { cell.className = "muted"; }
          cell.textContent = visible(text);
        }
        row.appendChild(cell);
      });
      timeline.appendChild(row);
      showState(stateAfter[data.kind]);
      if (status) { status.textContent = "live"; }
    };
    // Named events (the event's kind): listen for every kind the page may see.
    (timeline.getAttribute("data-kinds") || "").split(" ").forEach(function (kind) {
      if (kind) { source.addEventListener(kind, append); }
    });
    // The model's reply as it streams (when this daemon runs the task): shown until the whole
    // message arrives as an event.
    var reply = document.querySelector("[data-live-reply]");
    if (reply) {
      var calls = {};
      var show = function () {
        var text = reply.getAttribute("data-text") || "";
        Object.keys(calls).forEach(function (index) {
          var call = calls[index];
          text += "\n→ " + (call.name || "tool") + "(" + call.arguments + ")";
        });
        reply.textContent = visible(text);
        reply.hidden = text.length === 0;
      };
      source.addEventListener("delta", function (event) {
        var piece;
        try { piece = JSON.parse(event.data); } catch (e) { return; }
        if (typeof piece.content === "string") {
          reply.setAttribute("data-text", (reply.getAttribute("data-text") || "") + piece.content);
        } else if (piece.tool_call) {
          var call = calls[piece.tool_call.index] || { name: null, arguments: "" };
          call.name = call.name || piece.tool_call.name;
          call.arguments += piece.tool_call.arguments || "";
          calls[piece.tool_call.index] = call;
        }
        show();
      });
      source.addEventListener("retrying", function () {
        // The model is asked again from the beginning of the reply.
        reply.setAttribute("data-text", "");
        calls = {};
        show();
      });
      source.addEventListener("message", function () {
        reply.setAttribute("data-text", "");
        calls = {};
        show();
      });
    }
  }
  // A stream of changes to a list, that can be paused: `handlers` maps event names to functions
  // of the parsed data. It starts after the change `after` (where the page read what it shows),
  // when the page says; resuming asks for what changed since the last change seen.
  var follow = function (url, handlers, toggle, after) {
    var source = null;
    var last = after === undefined ? null : after;
    var open = function () {
      source = new EventSource(last === null ? url : url + "?after=" + last);
      Object.keys(handlers).forEach(function (name) {
        source.addEventListener(name, function (event) {
          if (event.lastEventId) { last = event.lastEventId; }
          var data = null;
          try { data = event.data ? JSON.parse(event.data) : null; } catch (e) { return; }
          handlers[name](data);
        });
      });
    };
    open();
    if (toggle) {
      toggle.hidden = false;
      toggle.addEventListener("click", function () {
        if (source) {
          source.close();
          source = null;
          toggle.textContent = "Resume live updates";
          toggle.setAttribute("data-paused", "true");
        } else {
          open();
          toggle.textContent = "Pause live updates";
          toggle.setAttribute("data-paused", "false");
          // What changed while paused is asked for once, whatever the stream replays.
          if (handlers.reset) { handlers.reset(null); }
        }
      });
    }
  };
  // The newest page of the tasks list: rows shown follow their task's state, the counts follow
  // the store, and newer tasks that match the same filters are counted, with a link, instead of
  // moving the rows under the reader's cursor.
  var fresh = document.querySelector("[data-new-tasks]");
  if (fresh) {
    var newest = Number(fresh.getAttribute("data-newest"));
    var poll = fresh.getAttribute("data-poll");
    // One question at a time; a change told meanwhile asks again when the answer is in.
    var asking = false;
    var again = false;
    var look = function () {
      if (asking) { again = true; return; }
      asking = true;
      var done = function () {
        asking = false;
        if (again) { again = false; look(); }
      };
      fetch(poll, { credentials: "same-origin" })
        .then(function (response) { return response.ok ? response.json() : null; })
        .then(function (page) {
          done();
          if (!page) { return; }
          var count = page.tasks.filter(function (task) { return task.id > newest; }).length;
          if (count > 0) {
            fresh.querySelector("[data-new-count]").textContent = String(count);
            fresh.hidden = false;
          }
        })
        .catch(done);
    };
    follow("/api/v1/tasks/stream", {
      task: function (task) {
        if (!task) { return; }
        var row = document.querySelector('tr[data-task="' + task.id + '"]');
        if (row) {
          var state = row.querySelector("[data-row-state]");
          if (state) {
            state.textContent = task.state;
            state.className = "state state-" + task.state;
            state.setAttribute("data-row-state", task.state);
          }
          var attempt = row.querySelector("[data-row-attempt]");
          if (attempt) { attempt.textContent = task.attempt + "/" + task.max_attempts; }
        }
        if (task.id > newest) { look(); }
      },
      counts: function (data) {
        if (!data) { return; }
        var total = 0;
        Object.keys(data.counts).forEach(function (state) {
          total += data.counts[state];
          var cell = document.querySelector('[data-count="' + state + '"]');
          if (cell) { cell.textContent = String(data.counts[state]); }
        });
        var all = document.querySelector('[data-count="all"]');
        if (all) { all.textContent = String(total); }
      },
      reset: function () { look(); }
    }, document.querySelector("[data-live-toggle]"), fresh.getAttribute("data-after") || undefined);
  }
  // The navigation's count of what waits for a person, kept current on every page.
  var badge = document.querySelector("[data-pending]");
  if (badge) {
    var inbox = document.querySelector("[data-inbox-new]");
    follow("/api/v1/approvals/stream", {
      pending: function (data) {
        if (!data) { return; }
        var before = Number(badge.getAttribute("data-pending"));
        badge.setAttribute("data-pending", String(data.pending));
        badge.textContent = String(data.pending);
        badge.hidden = data.pending === 0;
        // The inbox says when what it lists is no longer what waits.
        if (inbox && data.pending !== before) { inbox.hidden = false; }
      },
      approval: function () {}
    }, null);
  }
  // Forms that change something ask first.
  // A confirm dialog as a shortcut for a form that, without the script, lands on a page that
  // asks: on yes, the field that page's button carries (`data-confirm-field`) is added.
  document.querySelectorAll("form[data-confirm]").forEach(function (form) {
    form.addEventListener("submit", function (event) {
      if (!window.confirm(form.getAttribute("data-confirm"))) { event.preventDefault(); return; }
      var name = form.getAttribute("data-confirm-field");
      if (name && !form.querySelector('input[name="' + name + '"]')) {
        var field = document.createElement("input");
        field.type = "hidden";
        field.name = name;
        field.value = "yes";
        form.appendChild(field);
      }
    });
  });
})();
