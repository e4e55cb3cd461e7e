// Journeys through the dashboard in a real browser (Debian's chromium, driven by playwright-core),
// against the real daemon the Rust test `browser::dashboard_journeys_in_a_real_browser` starts.
// Each journey saves a screenshot in SHOTS. Run by that test with node's own test runner.
"use strict";

const { test, before, after } = require("node:test");
const assert = require("node:assert/strict");
const { chromium } = require("playwright-core");

const BASE = process.env.BASE;
const TOKEN = process.env.TOKEN;
const SHOTS = process.env.SHOTS;
const WORKSPACE = process.env.WORKSPACE;
const WAITING = process.env.WAITING_TASK;
const AUTOMATION = process.env.AUTOMATION;
const AGENT_PORT = process.env.AGENT_PORT;
const WATCH_MODEL = process.env.WATCH_MODEL;

let browser;

before(async () => {
  browser = await chromium.launch({
    executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
    args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
      "--disable-background-networking", "--disable-component-update", "--disable-sync"],
  });
});

after(async () => {
  if (browser) { await browser.close(); }
});

/// A browser context logged in through the login form.
async function loggedIn() {
  const context = await browser.newContext({ viewport: { width: 1280, height: 900 } });
  const page = await context.newPage();
  await page.goto(`${BASE}/`);
  assert.match(page.url(), /\/login$/, "a page needs a login first");
  await page.fill('input[name="token"]', TOKEN);
  await Promise.all([page.waitForURL(`${BASE}/`), page.click('button[type="submit"]')]);
  return { context, page };
}

/// Marks the document, so that a reload (which makes a new one) is noticed.
async function markDocument(page) {
  await page.evaluate(() => { window.__sameDocument = true; });
}

async function sameDocument(page) {
  return page.evaluate(() => window.__sameDocument === true);
}

/// Creates a task through the API whose gate sleeps `seconds`.
async function createTask(title, seconds) {
  const response = await fetch(`${BASE}/api/v1/tasks`, {
    method: "POST",
    headers: { authorization: `Bearer ${TOKEN}`, "content-type": "application/json" },
    body: JSON.stringify({ title, gates: [`sleep ${seconds}`], workspace: WORKSPACE }),
  });
  assert.equal(response.status, 201);
  return response.json();
}

test("the tasks list follows its tasks live, and can be paused", async () => {
  const { context, page } = await loggedIn();
  // The list says a new task arrived rather than moving its rows.
  const before = await page.locator("[data-task]").count();
  const total = Number(await page.textContent('[data-count="all"]'));
  const task = await createTask("from the API, listed", 6);
  await page.waitForSelector("[data-new-tasks]:not([hidden])", { timeout: 20000 });
  // The counts follow the store too.
  await page.waitForFunction((n) => document.querySelector('[data-count="all"]').textContent === String(n),
    total + 1, { timeout: 20000 });
  assert.equal(await page.textContent("[data-new-count]"), "1");
  assert.equal(await page.locator("[data-task]").count(), before, "the rows stayed");
  await page.screenshot({ path: `${SHOTS}/tasks-one-new.png`, fullPage: true });
  // Shown, its row follows its state without a reload.
  await page.click("[data-new-tasks] a");
  await page.waitForSelector(`tr[data-task="${task.id}"]`);
  await markDocument(page);
  await page.waitForSelector(`tr[data-task="${task.id}"] [data-row-state="succeeded"]`, { timeout: 60000 });
  assert.equal(await sameDocument(page), true, "the row changed without reloading");
  await page.screenshot({ path: `${SHOTS}/tasks-row-passed.png`, fullPage: true });
  // Paused, nothing moves; resumed, it catches up.
  await page.click("[data-live-toggle]");
  assert.equal(await page.getAttribute("[data-live-toggle]", "data-paused"), "true");
  const paused = await createTask("made while paused", 0);
  await new Promise((resolve) => setTimeout(resolve, 2000));
  assert.equal(await page.isHidden("[data-new-tasks]"), true, "nothing new is counted while paused");
  await page.click("[data-live-toggle]");
  assert.equal(await page.getAttribute("[data-live-toggle]", "data-paused"), "false");
  await page.waitForSelector("[data-new-tasks]:not([hidden])", { timeout: 20000 });
  assert.equal(await page.textContent("[data-new-count]"), "1");
  assert.ok(paused.id > task.id);
  await context.close();
});

test("a task created from the API passes on its page without a reload", async () => {
  const { context, page } = await loggedIn();
  const task = await createTask("from the API, watched", 8);
  await page.goto(`${BASE}/tasks/${task.id}`);
  const first = await page.getAttribute("[data-state]", "data-state");
  assert.ok(["queued", "running"].includes(first), `the task is still under way: ${first}`);
  await markDocument(page);
  await page.waitForSelector('[data-state="succeeded"]', { timeout: 60000 });
  await page.waitForSelector('td:text-is("succeeded")', { timeout: 10000 });
  assert.equal(await sameDocument(page), true, "the page changed without reloading");
  await page.screenshot({ path: `${SHOTS}/task-passed.png`, fullPage: true });
  await context.close();
});

test("an approval given in one page shows in another over SSE", async () => {
  const { context, page: taskPage } = await loggedIn();
  await taskPage.goto(`${BASE}/tasks/${WAITING}`);
  assert.equal(await taskPage.getAttribute("[data-state]", "data-state"), "waiting");
  await markDocument(taskPage);
  const inbox = await context.newPage();
  await inbox.goto(`${BASE}/approvals`);
  assert.equal(await inbox.textContent(".badge"), "1", "the navigation counts what waits");
  const card = inbox.locator(`[data-approval]`).first();
  // The card shows the command in full, before anyone decides.
  assert.equal((await card.locator("[data-command]").textContent()).trim(), "echo approved-run");
  await inbox.screenshot({ path: `${SHOTS}/approvals-with-context.png`, fullPage: true });
  await card.locator('button:text-is("Approve")').click();
  await inbox.waitForSelector("text=Nothing waits for a decision.");
  // The other page's badge follows without a reload.
  await taskPage.waitForSelector('[data-pending="0"][hidden]', { state: "attached", timeout: 20000 });
  await inbox.screenshot({ path: `${SHOTS}/approvals-after-approve.png`, fullPage: true });
  // The other page was told by the stream, not by a reload.
  await taskPage.waitForSelector('td:text-is("approval_decided")', { timeout: 30000 });
  await taskPage.waitForSelector('[data-state="succeeded"]', { timeout: 60000 });
  assert.equal(await sameDocument(taskPage), true);
  await taskPage.screenshot({ path: `${SHOTS}/approved-task.png`, fullPage: true });
  // The timeline reads in words, grouped per attempt, also for what arrived live; times say how
  // long ago, with the exact time on hover.
  await taskPage.waitForSelector('td:has-text("approved by dashboard")', { timeout: 30000 });
  await taskPage.waitForSelector('td:has-text("exec_shell(command=echo approved-run) succeeded")', { timeout: 30000 });
  assert.ok(await taskPage.locator("tr.attempt").count() >= 2, "a row per attempt");
  const hover = await taskPage.getAttribute("table.timeline time[data-at]", "title");
  assert.match(hover, /^\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2} UTC$/);
  assert.match(await taskPage.textContent("table.timeline time[data-at]"), /ago|just now/);
  // Rows that arrived live have their time too.
  const last = taskPage.locator("table.timeline tr[data-tone]").last().locator("time[data-at]");
  assert.match(await last.textContent(), /ago|just now/);
  await taskPage.screenshot({ path: `${SHOTS}/timeline-in-words.png`, fullPage: true });
  await context.close();
});

test("an automation runs now from its page", async () => {
  const { context, page } = await loggedIn();
  page.on("dialog", (dialog) => dialog.accept());
  await page.goto(`${BASE}/automations`);
  const row = page.locator(`[data-automation="${AUTOMATION}"]`);
  await Promise.all([
    page.waitForURL(/\/tasks\/\d+$/),
    row.locator('button:text-is("Run now")').click(),
  ]);
  await page.waitForSelector('[data-state="succeeded"]', { timeout: 60000 });
  await page.screenshot({ path: `${SHOTS}/automation-run-now.png`, fullPage: true });
  await context.close();
});

test("a logged-in browser never reaches an agent's listener, and another port cannot write", async () => {
  const { context, page } = await loggedIn();
  // An agent granted the network listens on 127.0.0.1 in its jail: the browser (which would send
  // the session cookie to any port of 127.0.0.1) cannot reach it, since the jail has a network
  // of its own.
  const agent = await context.newPage();
  await assert.rejects(
    agent.goto(`http://127.0.0.1:${AGENT_PORT}/`, { timeout: 10000 }),
    /ERR_CONNECTION_REFUSED|ERR_CONNECTION_RESET|ERR_EMPTY_RESPONSE/,
  );
  // A page of another origin (another port of this machine) posts to the dashboard with the
  // session's cookie: refused for its Origin, whatever it carries.
  const other = require("node:http").createServer((request, response) => {
    response.setHeader("content-type", "text/html");
    response.end(`<form id="f" method="post" action="${BASE}/approvals/1/approve">` +
      `<input name="csrf" value="guess"></form><script>document.getElementById("f").submit()</script>`);
  });
  await new Promise((resolve) => other.listen(0, "127.0.0.1", resolve));
  const attacker = await context.newPage();
  const refused = attacker.waitForResponse((r) => r.url().startsWith(`${BASE}/approvals/1/`));
  await attacker.goto(`http://127.0.0.1:${other.address().port}/`);
  const response = await refused;
  assert.equal(response.status(), 403);
  assert.equal(response.request().headers()["origin"], `http://127.0.0.1:${other.address().port}`);
  await attacker.screenshot({ path: `${SHOTS}/cross-origin-refused.png`, fullPage: true });
  other.close();
  await page.close();
  await context.close();
});

/// Creates a task through the API with one gate command.
async function createGate(title, gate) {
  const response = await fetch(`${BASE}/api/v1/tasks`, {
    method: "POST",
    headers: { authorization: `Bearer ${TOKEN}`, "content-type": "application/json" },
    body: JSON.stringify({ title, gates: [gate], workspace: WORKSPACE }),
  });
  assert.equal(response.status, 201);
  return response.json();
}

/// Waits until the API says the task's first gate runs.
async function gateRunning(id) {
  for (let i = 0; i < 600; i++) {
    const response = await fetch(`${BASE}/api/v1/tasks/${id}/gates/0/log?limit=1`, {
      headers: { authorization: `Bearer ${TOKEN}` },
    });
    if (response.ok && (await response.json()).state === "running") { return; }
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
  assert.fail("the gate never ran");
}

test("a running gate's output shows on its task page line by line", async () => {
  const { context, page } = await loggedIn();
  const errors = [];
  page.on("pageerror", (error) => errors.push(error.message));
  const task = await createGate("prints a line a second",
    "for i in 1 2 3 4 5 6; do echo \"tick $i\"; sleep 1; done");
  await page.goto(`${BASE}/tasks/${task.id}`);
  await markDocument(page);
  const panel = page.locator('[data-gate-panel="0"]');
  // Each line shows while the task still runs, before the next is printed.
  for (const n of [1, 2, 3]) {
    await panel.locator(`.line:has-text("tick ${n}")`).waitFor({ timeout: 30000 })
      .catch((e) => { throw new Error(`${e.message}; page errors: ${errors.join("; ")}`); });
    assert.equal(await page.getAttribute("[data-state]", "data-state"), "running", `tick ${n} came while it ran`);
    assert.equal(await panel.locator(`.line:has-text("tick ${n + 2}")`).count(), 0, `tick ${n} came before tick ${n + 2}`);
  }
  await page.screenshot({ path: `${SHOTS}/task-gate-live.png`, fullPage: true });
  // The follow ends with the verdict.
  await page.waitForSelector('[data-gate-panel="0"] [data-gate-verdict="passed"]', { timeout: 60000 });
  assert.equal(await panel.locator(".line").count(), 6);
  assert.equal(await sameDocument(page), true, "the lines came without a reload");
  await context.close();
});

test("the log view: search finds a line, follow appends, colours are colours", async () => {
  const { context, page } = await loggedIn();
  const task = await createGate("a log to read",
    "printf 'compiling\\n\\033[31mred alert\\033[0m <b>not bold</b>\\n'; for i in 1 2 3 4 5; do echo \"step $i\"; sleep 1; done");
  await gateRunning(task.id);
  await page.goto(`${BASE}/tasks/${task.id}/gates/0/log`);
  await markDocument(page);
  // Colours are classes around text, and markup in the output is text.
  await page.waitForSelector('.log .line .fg-1:text-is("red alert")', { timeout: 30000 });
  assert.equal(await page.locator(".log b").count(), 0, "no markup from the output");
  // Search finds the line, numbered and linked.
  await page.fill("[data-log-search]", "RED ALERT");
  await page.waitForSelector(".line.current");
  assert.equal(await page.textContent("[data-log-matches]"), "1 of 1");
  const line = await page.getAttribute(".line.current", "data-line");
  assert.equal(await page.getAttribute(".line.current .ln", "href"), `#L${line}`);
  // Follow appends the lines as the gate prints them.
  assert.equal(await page.getAttribute("[data-log-follow]", "data-following"), "true");
  const before = await page.locator(".log .line").count();
  await page.waitForSelector('.log .line:has-text("step 4")', { timeout: 30000 });
  assert.ok(await page.locator(".log .line").count() > before, "lines were appended");
  await page.screenshot({ path: `${SHOTS}/log-view.png`, fullPage: true });
  await page.waitForSelector('[data-log-verdict="passed"]', { timeout: 60000 });
  assert.equal(await page.getAttribute("[data-log-state]", "data-log-state"), "finished");
  assert.equal(await page.locator('.log .line:has-text("step 5")').count(), 1, "each line once");
  assert.equal(await sameDocument(page), true, "followed without a reload");
  await context.close();
});

test("an agent's shell job and terminal show on its task page as they print", async () => {
  const { context, page } = await loggedIn();
  const errors = [];
  page.on("pageerror", (error) => errors.push(error.message));
  // The agent (a scripted model) starts a job and opens a terminal, each printing a line a second.
  const response = await fetch(`${BASE}/api/v1/tasks`, {
    method: "POST",
    headers: { authorization: `Bearer ${TOKEN}`, "content-type": "application/json" },
    body: JSON.stringify({
      title: "runs a job and a terminal", prompt: "Run them.", workspace: WORKSPACE,
      model: { base_url: WATCH_MODEL, model: "scripted" },
      // task_shell_start is a tool of the full profile.
      agent: { profile: "full" },
    }),
  });
  assert.equal(response.status, 201);
  const task = await response.json();
  await page.goto(`${BASE}/tasks/${task.id}`);
  await markDocument(page);
  const job = page.locator('[data-log-panels] [data-log-panel^="jobs/"]');
  const terminal = page.locator('[data-log-panel="terminals/pty-1"]');
  const api = async (path) => (await fetch(`${BASE}/api/v1${path}`, { headers: { authorization: `Bearer ${TOKEN}` } })).text();
  const seen = async (panel, line) => panel.locator(line).first().waitFor({ timeout: 30000 })
    .catch(async (e) => {
      throw new Error(`${e.message}; page errors: ${errors.join("; ")}; logs: ${await api(`/tasks/${task.id}/logs`)}; `
        + `events: ${await api(`/tasks/${task.id}/events`)}`);
    });
  // Lines arrive while the task runs: the job's as printed, the terminal's in its colours, with
  // its escape sequences gone and its text escaped.
  await seen(job, '.line:has-text("job-tick-3")');
  await seen(terminal, '.line .fg-2:text-is("pty-tick-2")');
  assert.equal(await page.getAttribute("[data-state]", "data-state"), "running", "they came while it ran");
  assert.equal(await terminal.locator('.line:has-text("pty-tick-8")').count(), 0, "before the end");
  const drawn = await terminal.locator(".line .text").allTextContents();
  assert.ok(drawn.every((text) => !text.includes("\\x1b") && !text.includes("\\x0d")), drawn.join("|"));
  assert.equal(await page.locator("[data-no-commands]:visible").count(), 0, "no 'none' beside the panels");
  await page.screenshot({ path: `${SHOTS}/task-job-terminal-live.png`, fullPage: true });
  // Each follow ends with how its command ended.
  await page.waitForSelector('[data-log-panel="terminals/pty-1"] [data-gate-verdict="finished"]', { timeout: 60000 });
  await page.waitForSelector('[data-log-panels] [data-log-panel^="jobs/"] [data-gate-verdict="exited"]', { timeout: 60000 });
  assert.equal(await job.locator(".line").count(), 8);
  assert.equal(await terminal.locator(".line").count(), 8);
  assert.equal(await sameDocument(page), true, "the lines came without a reload");
  // Once the task ended, the page lists both with a link to each one's log view.
  await page.waitForSelector('[data-state="succeeded"]', { timeout: 60000 });
  await page.reload();
  const link = page.locator('[data-command="terminals/pty-1"] a[data-log-link]');
  await Promise.all([page.waitForURL(/\/terminals\/pty-1\/log$/), link.click()]);
  await page.waitForSelector('.log .line .fg-2:text-is("pty-tick-8")');
  assert.equal(await page.getAttribute("[data-log-state]", "data-log-state"), "finished");
  await context.close();
});

test("each page reads at a glance: charts, runs, workers, headers, decisions, local times", async () => {
  const { context, page } = await loggedIn();
  // The overview draws what ended per hour and the queue's latency, with no script of its own.
  await page.goto(`${BASE}/overview`);
  const ended = page.locator('svg[data-chart="ended"] g[data-hour]');
  assert.ok(await ended.count() >= 1, "this hour's column is drawn");
  let done = 0;
  for (const column of await ended.all()) { done += Number(await column.getAttribute("data-succeeded")); }
  assert.ok(done >= 3, `the tasks that passed are counted: ${done}`);
  assert.ok(await page.locator('svg[data-chart="latency"] g[data-hour] rect').count() >= 1);
  // The workers say which machine they are on and what they offer; nothing waits, so the
  // approvals badge is not shown at all.
  assert.match(await page.textContent("table.workers"), /host id/);
  assert.equal(await page.isVisible(".badge"), false, "no red badge for 0");
  await page.screenshot({ path: `${SHOTS}/overview.png`, fullPage: true });

  // Each automation shows its recent runs as marks: the run made from its page passed.
  await page.goto(`${BASE}/automations`);
  const marks = page.locator(`[data-automation="${AUTOMATION}"] [data-mark]`);
  assert.ok(await marks.count() >= 1, "a mark per recent run");
  assert.equal(await marks.last().getAttribute("data-mark"), "succeeded");
  await page.screenshot({ path: `${SHOTS}/automations.png`, fullPage: true });

  // A queued task (no worker offers what it requires) lists its gates and says why it waits.
  let response = await fetch(`${BASE}/api/v1/tasks`, {
    method: "POST",
    headers: { authorization: `Bearer ${TOKEN}`, "content-type": "application/json" },
    body: JSON.stringify({ title: "waits for a label", gates: ["cargo test"], workspace: WORKSPACE, require_labels: ["no-such-label"] }),
  });
  assert.equal(response.status, 201);
  const queued = await response.json();
  await page.goto(`${BASE}/tasks/${queued.id}`);
  assert.equal(await page.getAttribute("[data-state]", "data-state"), "queued");
  assert.match(await page.textContent("[data-gate-specs]"), /cargo test/);
  assert.match(await page.textContent("[data-gate-specs]"), /not run yet/);
  assert.equal(await page.locator("text=none run yet").count(), 0);
  await page.screenshot({ path: `${SHOTS}/task-queued.png`, fullPage: true });

  // An agent task shows its model, server and key variable, and its waiting request is decided
  // on its own page.
  response = await fetch(`${BASE}/api/v1/tasks`, {
    method: "POST",
    headers: { authorization: `Bearer ${TOKEN}`, "content-type": "application/json" },
    body: JSON.stringify({
      title: "asks on its page", prompt: "Run the command.", workspace: WORKSPACE,
      model: { base_url: process.env.ASK_MODEL, model: "scripted" },
      agent: { policy: { default: "allow", classes: { shell: "ask" } } },
    }),
  });
  assert.equal(response.status, 201);
  const asking = await response.json();
  await page.goto(`${BASE}/tasks/${asking.id}`);
  await page.waitForSelector('[data-state="waiting"]', { timeout: 60000 });
  await page.reload();
  assert.match(await page.textContent("[data-model]"), /scripted/);
  assert.match(await page.textContent("[data-model]"), /no key/);
  const row = page.locator("[data-task-approval]").first();
  await page.screenshot({ path: `${SHOTS}/task-approval-on-page.png`, fullPage: true });
  await Promise.all([
    page.waitForURL(`${BASE}/tasks/${asking.id}`),
    row.locator('button:text-is("Approve")').click(),
  ]);
  await page.waitForSelector('[data-state="succeeded"]', { timeout: 60000 });
  await context.close();

  // Times follow the person's languages: a 24-hour clock in German, AM/PM in American English.
  for (const [locale, clock] of [["de-DE", /\b\d{2}:\d{2}:\d{2}\b(?!\s?[AP]M)/], ["en-US", /[AP]M/]]) {
    const local = await browser.newContext({ viewport: { width: 1280, height: 900 }, locale });
    const tab = await local.newPage();
    await tab.goto(`${BASE}/login`);
    await tab.fill('input[name="token"]', TOKEN);
    await Promise.all([tab.waitForURL(`${BASE}/`), tab.click('button[type="submit"]')]);
    await tab.goto(`${BASE}/tasks/${asking.id}`);
    const shown = await tab.textContent("table.timeline time[data-at]");
    assert.match(shown, clock, `${locale}: ${shown}`);
    await local.close();
  }
});
