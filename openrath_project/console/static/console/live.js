// Live updates of the run and session pages over the WebSocket protocol (docs/console.md):
//   /ws/runs/<id>/?after=<event seq>      {type: "event" | "run" | "ready"}
//   /ws/sessions/<id>/?after=<chunk seq>  {type: "chunk" | "delta" | "ready"}
// The page was rendered up to `after`; the server backfills from there and goes live. On a
// dropped connection we reconnect with after=<last seq seen> and de-duplicate by seq. Messages
// are hints: when the socket cannot be opened at all (no WebSocket route behind this server),
// the page polls the same data from the HTTP API instead, and says so.
(function () {
  "use strict";
  var configNode = document.getElementById("live-config");
  if (!configNode) { return; }
  var config = JSON.parse(configNode.textContent);
  var indicator = document.getElementById("live");
  var TERMINAL = config.terminal || ["succeeded", "failed", "cancelled", "timed_out"];
  var STATUS_EVENTS = {
    "run.created": "queued", "run.claimed": "running", "run.waiting": "waiting",
    "run.needs_review": "needs_review", "run.succeeded": "succeeded", "run.failed": "failed",
    "run.cancelled": "cancelled", "run.timed_out": "timed_out", "run.resumed": "queued",
    "interrupt.resolved": "queued", "interrupt.expired": "queued", "effect.resolved": "queued",
    "lease.released": "queued", "lease.expired": "queued", "step.retry_scheduled": "queued"
  };
  var live = {
    config: config,
    after: config.after,
    transport: "connecting",
    received: 0,
    status: config.status || null,
    seen: {},
    stopped: false,
    failures: 0,
    everReady: false,
    socket: null
  };
  window.openrathLive = live;

  function setTransport(name, text) {
    live.transport = name;
    if (indicator) {
      indicator.setAttribute("data-transport", name);
      indicator.textContent = text;
    }
  }

  function stop(text) {
    live.stopped = true;
    setTransport("closed", text);
    if (live.socket) { live.socket.close(); }
  }

  function el(tag, className, text) {
    var node = document.createElement(tag);
    if (className) { node.className = className; }
    if (text !== undefined && text !== null) { node.textContent = String(text); }
    return node;
  }

  function pretty(value) {
    return JSON.stringify(value === undefined ? null : value, null, 2);
  }

  // --- Runs ------------------------------------------------------------------------------------

  var refreshTimer = null;
  var lastRunMessage = 0;

  function markSeen(selector) {
    document.querySelectorAll(selector).forEach(function (node) {
      live.seen[node.getAttribute("data-seq")] = true;
    });
  }

  function onEvent(event) {
    var key = String(event.seq);
    if (live.seen[key]) { return; }
    live.seen[key] = true;
    if (event.seq > live.after) { live.after = event.seq; }
    var list = document.getElementById("events");
    if (list) {
      // Shown at once as it came; the page's next re-read swaps in the server's typed line.
      var noEvents = document.getElementById("no-events");
      if (noEvents) { noEvents.remove(); }
      var item = el("li", "new ev-info");
      item.setAttribute("data-seq", key);
      item.setAttribute("data-type", event.type);
      item.appendChild(el("span", "seq", "#" + event.seq));
      item.appendChild(el("span", "type", event.type));
      item.appendChild(el("span", "step mono", event.step || ""));
      var data = event.data && Object.keys(event.data).length ? JSON.stringify(event.data) : "";
      item.appendChild(el("span", "text", data.length > 300 ? data.slice(0, 299) + "…" : data));
      list.appendChild(item);
      list.scrollTop = list.scrollHeight;
    }
    showEventCount(event.seq);
    if ((event.type === "interrupt.resolved" || event.type === "interrupt.expired") && event.data && event.data.interrupt) {
      disableDecisions('[data-interrupt="' + cssEscape(String(event.data.interrupt)) + '"]');
    }
    scheduleFragments();
    if (event.type === "step.completed" && event.step) {
      var node = document.querySelector('#plan-graph g.node[data-node="' + cssEscape(event.step) + '"]');
      if (node) { node.classList.add("visited"); }
    }
    if (STATUS_EVENTS[event.type]) {
      // The run message is what counts; re-read the run if it does not follow shortly.
      var seenAt = Date.now();
      clearTimeout(refreshTimer);
      refreshTimer = setTimeout(function () {
        if (lastRunMessage < seenAt) { refreshRun(); }
      }, 700);
    }
  }

  // The other parts of the run page that its events change (the decision forms, the summary,
  // the actions, the checkpoints, the state and output, the nav's queue counts) are
  // server-rendered: after an event or a run message the page itself is re-read (marked with
  // the fragment header) and those parts are swapped in. A decision form is disabled at once
  // when its interrupt is decided or the run leaves `waiting`, before the fresh page arrives.
  var FRAGMENTS = ["console-nav", "run-summary", "run-actions", "run-approvals", "plan-svg",
    "step-panels", "run-waterfall", "events", "run-checkpoints", "run-data"];
  var fragmentTimer = null;
  var fragmentBusy = false;
  var fragmentAgain = false;

  function scheduleFragments(delay) {
    if (config.kind !== "run") { return; }
    if (fragmentBusy) { fragmentAgain = true; return; }
    clearTimeout(fragmentTimer);
    fragmentTimer = setTimeout(refreshFragments, delay === undefined ? 300 : delay);
  }

  function refreshFragments() {
    fragmentBusy = true;
    fragmentAgain = false;
    fetch(location.pathname, {
      credentials: "same-origin",
      headers: { Accept: "text/html", "X-OpenRath-Fragment": "1" }
    })
      .then(function (response) { return response.ok ? response.text() : null; })
      .then(function (html) {
        if (html) { swapFragments(new DOMParser().parseFromString(html, "text/html")); }
      })
      .catch(function () { /* the next event tries again */ })
      .then(function () {
        fragmentBusy = false;
        if (fragmentAgain) { scheduleFragments(0); }
      });
  }

  var READ_ONLY = ["plan-svg", "step-panels", "run-waterfall", "events"];

  // A selector for the same control in a fresh copy of a read-only part.
  function sameFocus(active) {
    var node = active.closest("[data-node]");
    if (node) { return '[data-node="' + cssEscape(node.getAttribute("data-node")) + '"] a'; }
    var item = active.closest("li[data-seq]");
    if (item && active.tagName === "SUMMARY") {
      return 'li[data-seq="' + cssEscape(item.getAttribute("data-seq")) + '"] summary';
    }
    var panel = active.closest("[data-step]");
    if (panel && active.classList.contains("close")) {
      return '[data-step="' + cssEscape(panel.getAttribute("data-step")) + '"] a.close';
    }
    return null;
  }

  function interruptIds(node) {
    return (node.getAttribute("data-interrupts") || "").trim();
  }

  function swapFragments(fresh) {
    FRAGMENTS.forEach(function (id) {
      var old = document.getElementById(id);
      var next = fresh.getElementById(id);
      if (!old || !next) { return; }
      if (id === "run-approvals") {
        // Keep what a person is typing in a form that is still pending.
        if (interruptIds(old) === interruptIds(next) && !old.hasAttribute("data-stale")) { return; }
      } else if (old.querySelector("details[open]")) {
        return;  // someone is reading raw data there: a later event swaps it
      }
      var focusAgain = null;
      if (old.contains(document.activeElement) && document.activeElement !== document.body) {
        // A form under the person's cursor is not swapped (a later event swaps it); in the
        // read-only parts the focus moves to the same node or event in the fresh copy.
        focusAgain = sameFocus(document.activeElement);
        if (READ_ONLY.indexOf(id) < 0 || !focusAgain) { return; }
      }
      var wasAtBottom = id === "events" && old.scrollTop + old.clientHeight >= old.scrollHeight - 4;
      var replacement = document.importNode(next, true);
      old.replaceWith(replacement);
      if (wasAtBottom) { replacement.scrollTop = replacement.scrollHeight; }
      if (focusAgain) {
        var target = replacement.querySelector(focusAgain);
        if (target) { target.focus(); }
      }
    });
    var count = fresh.getElementById("events-count");
    if (count) { showEventCount(Number(count.getAttribute("data-total")) || 0); }
    var badge = fresh.getElementById("run-status");
    // The page was read after the event; a message that came in meanwhile re-reads it again.
    if (badge && badge.getAttribute("data-status")) { setStatus(badge.getAttribute("data-status")); }
  }

  function showEventCount(total) {
    var count = document.getElementById("events-count");
    if (!count) { return; }
    total = Math.max(total, Number(count.getAttribute("data-total")) || 0, live.after || 0);
    var shown = document.querySelectorAll("#events li[data-seq]").length;
    count.setAttribute("data-total", String(total));
    count.textContent = "(" + total + " event" + (total === 1 ? "" : "s") +
      (shown !== total ? ", " + shown + " shown" : "") + ")";
  }

  function disableDecisions(selector) {
    var box = document.getElementById("run-approvals");
    if (!box) { return; }
    box.querySelectorAll(selector).forEach(function (card) {
      if (card.hasAttribute("data-decided")) { return; }
      card.setAttribute("data-decided", "");
      box.setAttribute("data-stale", "");
      card.querySelectorAll("form.resolve button, form.resolve input, form.resolve select, form.resolve textarea")
        .forEach(function (control) { control.disabled = true; });
      card.appendChild(el("p", "muted decided-note", "Decided elsewhere or no longer pending: refreshing…"));
    });
  }

  function cssEscape(value) {
    return window.CSS && CSS.escape ? CSS.escape(value) : String(value).replace(/"/g, '\\"');
  }

  function onRun(run) {
    lastRunMessage = Date.now();
    var status = run.status;
    var changed = status !== live.status;
    setStatus(status);
    if (status && status !== "waiting") { disableDecisions("[data-interrupt]"); }
    if (changed || fragmentBusy) { scheduleFragments(); }
    var terminal = TERMINAL.indexOf(status) >= 0;
    var next = terminal ? [] : (run.next_nodes || []);
    var nextNode = document.getElementById("run-next");
    if (nextNode) { nextNode.textContent = next.length ? next.join(", ") : "—"; }
    document.querySelectorAll("#plan-graph g.node").forEach(function (node) {
      node.classList.toggle("current", next.indexOf(node.getAttribute("data-node")) >= 0);
    });
    var cancel = document.getElementById("cancel-form");
    if (cancel) { cancel.hidden = terminal; }
    var resume = document.getElementById("resume-form");
    if (resume) { resume.hidden = status !== "needs_review"; }
    var errorBox = document.getElementById("run-error");
    if (errorBox) {
      errorBox.hidden = !run.error;
      var pre = errorBox.querySelector("pre");
      if (pre) { pre.textContent = run.error ? pretty(run.error) : ""; }
    }
    if (terminal) {
      var finished = document.getElementById("run-finished");
      if (finished && finished.textContent.trim() === "—") { finished.textContent = "just now"; }
    }
  }

  function setStatus(status) {
    live.status = status;
    var badge = document.getElementById("run-status");
    if (badge && status) {
      badge.textContent = status;
      badge.className = "status status-" + status;
      badge.setAttribute("data-status", status);
    }
  }

  function refreshRun() {
    fetch(config.api_path, { credentials: "same-origin", headers: { Accept: "application/json" } })
      .then(function (response) { return response.ok ? response.json() : null; })
      .then(function (run) {
        if (run) { onRun({ id: run.id, status: run.status, next_nodes: run.next_nodes, error: run.error }); }
      })
      .catch(function () { /* the next message or poll catches up */ });
  }

  // --- Sessions --------------------------------------------------------------------------------

  var typingTimers = {};

  function usageText(usage) {
    if (!usage || typeof usage !== "object") { return ""; }
    var parts = [];
    if (usage.prompt_tokens !== undefined && usage.prompt_tokens !== null) { parts.push(usage.prompt_tokens + " in"); }
    if (usage.completion_tokens !== undefined && usage.completion_tokens !== null) { parts.push(usage.completion_tokens + " out"); }
    if (!parts.length && usage.total_tokens !== undefined && usage.total_tokens !== null) { parts.push(usage.total_tokens + " tokens"); }
    if (typeof usage.cost_usd === "number" && usage.cost_usd) { parts.push("$" + usage.cost_usd.toFixed(4)); }
    return parts.join(" · ");
  }

  var KIND_LABELS = {
    message: "message", tool_call: "tool call", tool_result: "tool result",
    summary: "summary", event: "event", artifact: "artifact"
  };

  // An artifact is downloaded through the session the page shows (docs/sessions.md).
  function artifactLink(ref, text) {
    if (!ref || typeof ref.digest !== "string" || !/^[0-9a-f]{64}$/.test(ref.digest)) { return null; }
    var link = el("a", "artifact-download", text);
    link.href = "/api/v1/sessions/" + config.id + "/artifacts/" + ref.digest + "/";
    link.setAttribute("download", "");
    return link;
  }

  function textOf(value) {
    return typeof value === "string" ? value : pretty(value);
  }

  function renderChunk(chunk) {
    var item = el("li", "chunk role-" + chunk.role + " kind-" + chunk.kind + (chunk.trust === "untrusted" ? " untrusted" : ""));
    item.setAttribute("data-seq", String(chunk.seq));
    var head = el("div", "chunk-head");
    head.appendChild(el("span", "seq", "#" + chunk.seq));
    head.appendChild(el("span", "role", chunk.role));
    head.appendChild(el("span", "kind kind-label-" + chunk.kind, KIND_LABELS[chunk.kind] || chunk.kind));
    if (chunk.agent) { head.appendChild(el("span", "agent", chunk.agent)); }
    if (chunk.workflow) { head.appendChild(el("span", "workflow", chunk.workflow)); }
    head.appendChild(el("span", "trust trust-" + chunk.trust, chunk.trust));
    if (chunk.branch) {
      var branch = el("span", "branch", "from branch ");
      branch.title = String(chunk.branch);
      branch.appendChild(el("code", "", "…" + String(chunk.branch).slice(-8)));
      head.appendChild(branch);
    }
    var usage = usageText(chunk.usage);
    if (usage) { head.appendChild(el("span", "usage", usage)); }
    if (chunk.run) {
      var link = el("a", "run", "run \u2026" + String(chunk.run).replace(/-/g, "").slice(-8) + (chunk.step ? " · " + chunk.step : ""));
      link.href = "/console/runs/" + chunk.run + "/";
      head.appendChild(link);
    }
    var time = el("time", "", String(chunk.created_at || "").slice(0, 19).replace("T", " "));
    time.setAttribute("datetime", chunk.created_at || "");
    head.appendChild(time);
    item.appendChild(head);
    var content = chunk.content;
    var isObject = content && typeof content === "object" && !Array.isArray(content);
    var body;
    if (isObject && (chunk.kind === "message" || chunk.kind === "summary") && typeof content.text === "string") {
      body = el("div", "text", content.text);
    } else if (isObject && chunk.kind === "tool_call") {
      body = el("div", "tool-call", "call ");
      body.appendChild(el("span", "tool-name", content.name || ""));
      if (content.id) { body.appendChild(document.createTextNode(" ")); body.appendChild(el("code", "call-id", content.id)); }
      body.appendChild(el("pre", "json arguments", pretty(content.arguments)));
    } else if (isObject && chunk.kind === "tool_result") {
      body = el("div", "tool-result", "result of ");
      body.appendChild(el("span", "tool-name", content.name || ""));
      var callId = content.tool_call_id || chunk.tool_call_id;
      if (callId) { body.appendChild(document.createTextNode(" ")); body.appendChild(el("code", "call-id", callId)); }
      if (chunk.trust === "untrusted") {
        body.appendChild(document.createTextNode(" "));
        body.appendChild(el("span", "untrusted-note", "tool output: data, not instructions"));
      }
      body.appendChild(el("pre", "output", textOf(content.output)));
      if (content.error !== undefined && content.error !== null) { body.appendChild(el("pre", "error", textOf(content.error))); }
      var full = artifactLink(content.artifact, "download the full output");
      if (full) { var para = el("p", "artifact-link"); para.appendChild(full); body.appendChild(para); }
    } else if (isObject && chunk.kind === "artifact" && artifactLink(content, "")) {
      body = el("div", "artifact");
      body.appendChild(artifactLink(content, "⤓ download " + (content.name || content.filename || "artifact")));
      body.appendChild(el("span", "muted", " " + (content.media_type || "")));
    } else {
      body = el("pre", "json", pretty(content));
    }
    item.appendChild(body);
    return item;
  }

  function clearTyping(agent) {
    document.querySelectorAll("#typing .typing").forEach(function (line) {
      if (agent === undefined || line.getAttribute("data-agent") === agent) { line.remove(); }
    });
  }

  function onChunk(chunk) {
    var key = String(chunk.seq);
    if (live.seen[key]) { return; }
    live.seen[key] = true;
    if (chunk.seq > live.after) { live.after = chunk.seq; }
    var list = document.getElementById("chunks");
    var empty = document.getElementById("no-chunks");
    if (empty) { empty.remove(); }
    if (list) { list.appendChild(renderChunk(chunk)); }
    var length = document.getElementById("session-length");
    if (length && chunk.seq + 1 > Number(length.textContent)) { length.textContent = String(chunk.seq + 1); }
    clearTyping(chunk.agent || "");
  }

  function onDelta(message) {
    var box = document.getElementById("typing");
    if (!box || !message.delta) { return; }
    var agent = message.agent || "";
    var line = null;
    box.querySelectorAll(".typing").forEach(function (node) {
      if (node.getAttribute("data-agent") === agent) { line = node; }
    });
    if (!line || line.getAttribute("data-turn") !== String(message.turn)) {
      if (line) { line.remove(); }
      line = el("div", "typing");
      line.setAttribute("data-agent", agent);
      line.setAttribute("data-turn", String(message.turn));
      line.appendChild(el("strong", "", (agent || "model") + " is typing: "));
      line.appendChild(el("span", "typed", ""));
      box.appendChild(line);
    }
    var typed = line.querySelector(".typed");
    typed.textContent += message.delta;
    clearTimeout(typingTimers[agent]);
    typingTimers[agent] = setTimeout(function () { clearTyping(agent); }, 20000);
  }

  // --- Transport -------------------------------------------------------------------------------

  function handle(message) {
    live.received += 1;
    if (message.type === "event" && message.event) { onEvent(message.event); }
    else if (message.type === "run" && message.run) { onRun(message.run); }
    else if (message.type === "chunk" && message.chunk) { onChunk(message.chunk); }
    else if (message.type === "delta") { onDelta(message); }
  }

  function socketUrl() {
    var scheme = location.protocol === "https:" ? "wss:" : "ws:";
    return scheme + "//" + location.host + config.ws_path + "?after=" + encodeURIComponent(live.after);
  }

  function connect() {
    if (live.stopped) { return; }
    var socket;
    var ready = false;
    try {
      socket = new WebSocket(socketUrl());
    } catch (error) {
      startPolling();
      return;
    }
    live.socket = socket;
    socket.onmessage = function (event) {
      var message;
      try { message = JSON.parse(event.data); } catch (error) { return; }
      if (message.type === "ready") {
        ready = true;
        live.everReady = true;
        live.failures = 0;
        setTransport("websocket", "live");
        return;
      }
      handle(message);
    };
    socket.onclose = function (event) {
      live.socket = null;
      if (live.stopped) { return; }
      if (event.code === 4401) { stop("signed out: log in again"); return; }
      if (event.code === 4403) { stop("not allowed to watch this"); return; }
      if (event.code === 4404) { stop("not found"); return; }
      var delay = 500;
      if (event.code === 4429) {
        delay = 5000 + Math.random() * 5000;
      } else if (!ready) {
        live.failures += 1;
        if (!live.everReady && live.failures >= 3) { startPolling(); return; }
        delay = Math.min(10000, 400 * Math.pow(2, live.failures));
      }
      setTransport("connecting", "reconnecting…");
      setTimeout(connect, delay);
    };
  }

  function startPolling() {
    setTransport("polling", "live (polling)");
    poll();
  }

  function getJson(url) {
    return fetch(url, { credentials: "same-origin", headers: { Accept: "application/json" } })
      .then(function (response) {
        if (response.status === 401 || response.status === 403) { stop("not allowed to watch this"); return null; }
        if (response.status === 404) { stop("not found"); return null; }
        return response.ok ? response.json() : null;
      });
  }

  function poll() {
    if (live.stopped) { return; }
    var isRun = config.kind === "run";
    var url = config.api_path + (isRun ? "events/" : "chunks/") + "?after=" + encodeURIComponent(live.after) + "&limit=200";
    getJson(url)
      .then(function (page) {
        if (!page) { return null; }
        page.results.forEach(function (item) {
          handle(isRun ? { type: "event", event: item } : { type: "chunk", chunk: item });
        });
        return isRun ? getJson(config.api_path) : null;
      })
      .then(function (run) {
        if (run) { onRun({ id: run.id, status: run.status, next_nodes: run.next_nodes, error: run.error }); }
      })
      .catch(function () { /* try again on the next tick */ })
      .then(function () {
        if (!live.stopped) { setTimeout(poll, 2000); }
      });
  }

  markSeen(config.kind === "run" ? "#events li[data-seq]" : "#chunks li[data-seq]");
  if (!("WebSocket" in window)) { startPolling(); } else { connect(); }
})();
