// The lineage graph: Cytoscape.js with the dagre layout (both served by this server).
// Nodes are sessions coloured by the dominant agent of their own chunks (named in the label and
// the legend too: colour is never the only signal), edges are styled by operation and labelled
// at their midpoints on a background; dagre lays the graph out in ranks with node sizes that
// include the labels, so labels do not overlap. A click opens the session. The first page comes
// with the page; "Load more" follows the lineage API's `next` (whose nodes carry the session's
// producing agent only).
(function () {
  "use strict";
  var data = JSON.parse(document.getElementById("lineage-data").textContent);
  var container = document.getElementById("lineage");
  if (!container || typeof window.cytoscape !== "function") { return; }

  var PALETTE = ["#2f5fd0", "#1f7a3d", "#b3261e", "#8a5cd0", "#d08a00", "#00838f", "#c2185b",
                 "#5d4037", "#455a64", "#7cb342", "#f4511e", "#3949ab"];
  var NO_AGENT = "(no agent)";
  var OPS = {
    fork: { color: "#2f5fd0", style: "solid", width: 2 },
    merge: { color: "#8a5cd0", style: "solid", width: 3 },
    detach: { color: "#9e9e9e", style: "dotted", width: 2 },
    compress: { color: "#d08a00", style: "dashed", width: 2 },
    "import": { color: "#1f7a3d", style: "dashed", width: 2 }
  };
  var sessionUrl = container.getAttribute("data-session-url");
  // A Map, not a plain object: agent names are data, and "__proto__" or "constructor" would
  // otherwise read and write the object's prototype instead of an entry.
  var agents = new Map();
  var pending = [];  // edges whose parent is not loaded yet
  var next = data.next;

  function agentColor(agent) {
    if (!agents.has(agent)) {
      agents.set(agent, PALETTE[agents.size % PALETTE.length]);
      renderAgentLegend();
    }
    return agents.get(agent);
  }

  function clip(text, size) {
    return text.length > size ? text.slice(0, size - 1) + "…" : text;
  }

  // The node's agents, dominant first: from its own chunks (the console's first page), else
  // the agent that produced the session (the API's later pages).
  function nodeAgents(node) {
    if (Array.isArray(node.agents) && node.agents.length) {
      return node.agents.map(function (a) { return String(a.agent); });
    }
    return node.agent ? [String(node.agent)] : [];
  }

  // A run fork's working session (runs_app.services.forks) names the run and checkpoint it
  // was forked from in its metadata: the graph says "run fork @k" instead of the bare op.
  function runFork(node) {
    var from = node.metadata && node.metadata.forked_from;
    return from && typeof from === "object" && from.run ? from : null;
  }

  function label(node, agent, others) {
    var title = clip(node.title || "\u2026" + String(node.id).replace(/-/g, "").slice(-8), 26);
    var who = clip(agent, 24) + (others > 0 ? " +" + others : "");
    var fork = runFork(node);
    var op = fork ? "run fork @" + fork.checkpoint : node.op;
    return title + "\n" + who + "\n" + op + " · " + node.length;
  }

  var cy = window.cytoscape({
    container: container,
    wheelSensitivity: 0.3,
    style: [
      { selector: "node", style: {
        "background-color": "data(color)", "label": "data(label)", "color": "#1d2330",
        "font-size": 10, "text-wrap": "wrap", "text-max-width": "170px", "text-valign": "bottom",
        "text-margin-y": 4, "text-background-color": "#ffffff", "text-background-opacity": 1,
        "text-background-padding": 2, "width": 26, "height": 26, "border-width": 1,
        "border-color": "#ffffff"
      } },
      { selector: "node.focus", style: { "border-width": 5, "border-color": "#1d2330" } },
      { selector: "node.run-fork", style: { "shape": "round-rectangle" } },
      { selector: "node:selected", style: { "overlay-color": "#2f5fd0", "overlay-opacity": 0.25, "overlay-padding": 6 } },
      { selector: "node.match", style: { "border-width": 4, "border-color": "#d08a00" } },
      { selector: ".faded", style: { "opacity": 0.25 } },
      { selector: "node.picked-a", style: { "outline-width": 3, "outline-color": "#1d2330", "outline-offset": 3 } },
      { selector: "node.picked-b", style: { "outline-width": 3, "outline-color": "#d08a00", "outline-offset": 3 } },
      { selector: "edge", style: {
        "curve-style": "bezier", "target-arrow-shape": "triangle", "width": "data(width)",
        "line-color": "data(color)", "target-arrow-color": "data(color)", "line-style": "data(style)",
        "label": "data(op)", "font-size": 8, "color": "#5f6b7a", "text-background-color": "#ffffff",
        "text-background-opacity": 1, "text-background-padding": 2,
        "text-background-shape": "roundrectangle"
      } }
    ],
    elements: []
  });

  function addNodes(nodes) {
    var added = [];
    nodes.forEach(function (node) {
      if (cy.getElementById(node.id).nonempty()) { return; }
      var names = nodeAgents(node);
      var agent = names.length ? names[0] : NO_AGENT;
      names.slice(1).forEach(agentColor);  // every agent of the graph is in the legend
      added.push({ group: "nodes", data: {
        id: node.id, label: label(node, agent, names.length - 1), agent: agent, agents: names,
        color: agentColor(agent), op: node.op, length: node.length, title: node.title || "",
        runFork: runFork(node) ? String(runFork(node).run) : ""
      }, classes: [node.id === data.session ? "focus" : "", runFork(node) ? "run-fork" : ""].join(" ").trim() });
    });
    cy.add(added);
  }

  function edgeElement(edge) {
    var op = OPS[edge.op] || OPS.fork;
    return { group: "edges", data: {
      id: "e:" + edge.parent + ":" + edge.child, source: edge.parent, target: edge.child,
      op: edge.op, color: op.color, style: op.style, width: op.width
    } };
  }

  function addEdges(edges) {
    var waiting = [];
    var ready = [];
    pending.concat(edges).forEach(function (edge) {
      if (cy.getElementById("e:" + edge.parent + ":" + edge.child).nonempty()) { return; }
      if (cy.getElementById(edge.parent).nonempty() && cy.getElementById(edge.child).nonempty()) {
        ready.push(edgeElement(edge));
      } else {
        waiting.push(edge);
      }
    });
    pending = waiting;
    cy.add(ready);
  }

  function relayout() {
    cy.layout({ name: "dagre", rankDir: "TB", ranker: "network-simplex", nodeSep: 50,
                rankSep: 70, edgeSep: 20, nodeDimensionsIncludeLabels: true, fit: true,
                padding: 24, animate: false }).run();
    document.getElementById("lineage-count").textContent =
      cy.nodes().length + " session" + (cy.nodes().length === 1 ? "" : "s") + " loaded" +
      (next ? " (more to load)" : "");
    document.getElementById("lineage-more").hidden = !next;
  }

  function renderAgentLegend() {
    var legend = document.getElementById("legend-agents");
    legend.textContent = "";
    legend.appendChild(document.createTextNode("Agents: "));
    Array.from(agents.keys()).sort().forEach(function (agent) {
      var item = document.createElement("span");
      item.className = "legend-agent";
      item.setAttribute("data-agent", agent);
      var swatch = document.createElement("span");
      swatch.className = "swatch";
      swatch.style.background = agents.get(agent);
      item.appendChild(swatch);
      item.appendChild(document.createTextNode(agent));
      legend.appendChild(item);
    });
  }

  function renderOpLegend() {
    var legend = document.getElementById("legend-ops");
    legend.appendChild(document.createTextNode("Operations: "));
    Object.keys(OPS).forEach(function (op) {
      var item = document.createElement("span");
      var line = document.createElement("span");
      line.className = "line";
      line.style.borderTopColor = OPS[op].color;
      line.style.borderTopStyle = OPS[op].style;
      item.appendChild(line);
      item.appendChild(document.createTextNode(op));
      legend.appendChild(item);
    });
  }

  function load(page) {
    addNodes(page.nodes);
    addEdges(page.edges);
    next = page.next;
    relayout();
  }

  document.getElementById("lineage-more").addEventListener("click", function () {
    if (!next) { return; }
    var button = this;
    button.disabled = true;
    fetch(next, { credentials: "same-origin", headers: { Accept: "application/json" } })
      .then(function (response) {
        if (!response.ok) { throw new Error("HTTP " + response.status); }
        return response.json();
      })
      .then(load)
      .catch(function (error) { window.alert("Could not load more of the graph: " + error.message); })
      .then(function () { button.disabled = false; });
  });
  document.getElementById("lineage-fit").addEventListener("click", function () { cy.fit(undefined, 24); });

  var pickMode = document.getElementById("compare-pick-mode");
  var picks = 0;

  function ensureOption(select, node) {
    var id = node.id();
    var found = Array.prototype.some.call(select.options, function (o) { return o.value === id; });
    if (!found) {
      var option = document.createElement("option");
      option.value = id;
      option.textContent = (node.data("title") || node.data("op")) + " \u2026" + id.replace(/-/g, "").slice(-8);
      select.appendChild(option);
    }
    select.value = id;
  }

  function openSession(node) {
    window.location.href = sessionUrl.replace("00000000-0000-0000-0000-000000000000", node.id());
  }

  cy.on("tap", "node", function (event) {
    if (pickMode && pickMode.checked) {
      var select = document.getElementById(picks % 2 === 0 ? "compare-a" : "compare-b");
      ensureOption(select, event.target);
      cy.nodes().removeClass("picked-" + (picks % 2 === 0 ? "a" : "b"));
      event.target.addClass("picked-" + (picks % 2 === 0 ? "a" : "b"));
      picks += 1;
      return;
    }
    openSession(event.target);
  });

  // Search: matching sessions are outlined, the others faded, and the view fits the matches.
  var search = document.getElementById("lineage-search");
  var searchResult = document.getElementById("lineage-search-result");
  function runSearch() {
    var term = search.value.trim().toLowerCase();
    cy.elements().removeClass("match faded");
    if (!term) { searchResult.textContent = ""; return; }
    var matches = cy.nodes().filter(function (node) {
      var text = [node.id(), node.data("title"), node.data("op")].concat(node.data("agents") || []).join(" ").toLowerCase();
      return text.indexOf(term) >= 0 || node.id().replace(/-/g, "").indexOf(term.replace(/[-…]/g, "")) >= 0;
    });
    searchResult.textContent = matches.length + " match" + (matches.length === 1 ? "" : "es");
    if (matches.length) {
      cy.elements().not(matches).addClass("faded");
      matches.addClass("match");
      cy.fit(matches, 60);
      cy.nodes().unselect();
      matches[0].select();
    }
  }
  if (search) {
    search.addEventListener("input", runSearch);
    search.addEventListener("keydown", function (event) {
      var chosen = cy.nodes(":selected");
      if (event.key === "Enter" && chosen.length) { event.preventDefault(); openSession(chosen[0]); }
    });
  }

  function zoomBy(factor) {
    cy.zoom({ level: cy.zoom() * factor, renderedPosition: { x: container.clientWidth / 2, y: container.clientHeight / 2 } });
  }
  document.getElementById("lineage-zoom-in").addEventListener("click", function () { zoomBy(1.25); });
  document.getElementById("lineage-zoom-out").addEventListener("click", function () { zoomBy(0.8); });
  // Keyboard on the graph: arrows pan, + / - zoom, 0 fits, Tab-like n / p walk the sessions,
  // Enter opens the selected one.
  container.addEventListener("keydown", function (event) {
    var step = 60;
    var moves = { ArrowLeft: [step, 0], ArrowRight: [-step, 0], ArrowUp: [0, step], ArrowDown: [0, -step] };
    if (moves[event.key]) { cy.panBy({ x: moves[event.key][0], y: moves[event.key][1] }); }
    else if (event.key === "+" || event.key === "=") { zoomBy(1.25); }
    else if (event.key === "-") { zoomBy(0.8); }
    else if (event.key === "0") { cy.fit(undefined, 24); }
    else if (event.key === "n" || event.key === "p") {
      var nodes = cy.nodes().sort(function (a, b) { return a.position("y") - b.position("y") || a.position("x") - b.position("x"); });
      var current = nodes.indexOf(cy.nodes(":selected")[0]);
      var index = event.key === "n" ? (current + 1) % nodes.length : (current - 1 + nodes.length) % nodes.length;
      cy.nodes().unselect();
      nodes[index].select();
      cy.center(nodes[index]);
      searchResult.textContent = nodes[index].data("label").split("\n").join(" · ");
    }
    else if (event.key === "Enter" && cy.nodes(":selected").length) { openSession(cy.nodes(":selected")[0]); }
    else { return; }
    event.preventDefault();
  });

  renderOpLegend();
  load(data);
  window.openrathLineage = { cy: cy, pending: function () { return pending.length; } };
})();
