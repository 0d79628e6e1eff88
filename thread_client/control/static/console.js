// The operator's console: polls /api/v1/status every second and the dead letters every ten seconds while the tab is
// shown (each page of them costs the daemon a read of what was added to its results file), and sends the
// operator's commands with the control token. Every value from the daemon is shown with textContent, never parsed
// as HTML: a request id or a server's message is text, whatever characters it holds.
"use strict";

(() => {
  const STATUS_EVERY_MS = 1000;
  const DEAD_EVERY_MS = 10000; // and at once after a command, a filter or a page change, or when the tab is shown
  // Outcomes whose order may be at the exchange already: requeued only once the operator confirms that risk.
  const DOUBLE_RISK = new Set(["unknown", "duplicate"]);
  const CHART_SPAN_S = 300; // the chart keeps about five minutes of points in memory
  const CHART_MIN_SPAN_S = 60; // and shows at least the last minute, so the first points are not a dot
  const DEAD_PAGE_SIZE = 50;
  // The queues' names as the page shows them: a daemon's, then a group's (the cluster console's).
  const QUEUE_NAMES = {main: "main", dlq: "retry (DLQ)", work: "work stream (not yet taken)",
    pending: "taken, no record yet", dead: "dead letters"};
  const TOKEN_ITEM = "thread_client.control.token"; // the tab's sessionStorage: gone when the tab closes

  const $ = (selector, root = document) => root.querySelector(selector);
  const rate = []; // {at: epoch s, value: accepted/s}, oldest first
  // A key's or a dead letter's <tr> by its id, kept across polls so that a row and its buttons stay the same elements.
  const keyRows = new Map();
  const deadRows = new Map();
  const dead = {cursors: [null], next: null}; // the cursor of each page opened so far; the shown page is the last
  let pending = null; // a command waiting for a token; it runs once the operator gives one

  // ---- formatting ----------------------------------------------------------------------------------------------

  function seconds(value) {
    if (value === null || value === undefined) return "–";
    if (value < 60) return `${value.toFixed(1)} s`;
    if (value < 3600) return `${Math.floor(value / 60)} min ${Math.round(value % 60)} s`;
    return `${Math.floor(value / 3600)} h ${Math.round((value % 3600) / 60)} min`;
  }

  function clockTime(epochSeconds) {
    return new Date(epochSeconds * 1000).toLocaleTimeString([], {hour12: false});
  }

  function heldUntil(epochSeconds) {
    if (epochSeconds === null || epochSeconds === undefined) return "–";
    const left = epochSeconds - Date.now() / 1000;
    return left > 0 ? `${clockTime(epochSeconds)} (in ${seconds(left)})` : clockTime(epochSeconds);
  }

  function budget(rules) {
    const names = Object.keys(rules || {});
    if (names.length === 1) return String(rules[names[0]]);
    return names.map((name) => `${name}: ${rules[name]}`).join(", ") || "–";
  }

  function at(value) {
    return typeof value === "number" ? clockTime(value) : String(value ?? "–");
  }

  // ---- building rows (text only) -------------------------------------------------------------------------------

  function cell(tag, text, field) {
    const element = document.createElement(tag);
    element.textContent = text;
    if (field) element.dataset.field = field;
    return element;
  }

  function button(label, action, data) {
    const element = document.createElement("button");
    element.type = "button";
    element.textContent = label;
    element.dataset.action = action;
    Object.assign(element.dataset, data);
    return element;
  }

  function setField(root, field, text) {
    const element = root.querySelector(`[data-field="${field}"]`);
    if (element.textContent !== text) element.textContent = text;
  }

  function replaceRows(tbody, rows, emptyText, columns) {
    if (rows.length === 0) {
      const empty = cell("td", emptyText);
      empty.colSpan = columns;
      empty.className = "empty";
      rows = [document.createElement("tr")];
      rows[0].append(empty);
    }
    tbody.replaceChildren(...rows);
  }

  // ---- the status ----------------------------------------------------------------------------------------------

  function keyRow(key) {
    const row = document.createElement("tr");
    row.dataset.keyId = key.id;
    row.append(
      cell("th", key.id, "id"), cell("td", "", "name"), cell("td", "", "state"), cell("td", "", "held_until"),
      cell("td", "", "accepted_per_s"), cell("td", "", "strikes"), cell("td", "", "budget"),
    );
    row.cells[0].scope = "row";
    const actions = document.createElement("td");
    const retire = button("Retire…", "retire", {keyId: key.id});
    retire.className = "danger";
    actions.append(button("Pause", "pause", {keyId: key.id}), button("Resume", "resume", {keyId: key.id}),
      button("Un-park", "unpark", {keyId: key.id}), retire);
    row.append(actions);
    return row;
  }

  // A key of a group (the cluster console) says which member owns it, under which fence.
  function ownedState(key) {
    if (key.fence === undefined) return key.owner ? `${key.state} (${key.owner})` : key.state;
    return key.owner ? `${key.state} (${key.owner}, fence ${key.fence})` : `${key.state} (fence ${key.fence})`;
  }

  // The states of a key that sends nothing more this run (a parked one may be un-parked).
  const OUT_OF_SERVICE = new Set(["parked", "blocked", "retired"]);

  function showKeys(keys) {
    const tbody = $("#keys tbody");
    const seen = new Set();
    for (const key of keys) {
      seen.add(key.id);
      let row = keyRows.get(key.id);
      if (!row) {
        row = keyRow(key);
        keyRows.set(key.id, row);
      }
      tbody.append(row); // moves a known row into the status's order
      row.dataset.state = key.state;
      setField(row, "name", key.name);
      setField(row, "state", ownedState(key));
      setField(row, "held_until", heldUntil(key.held_until));
      setField(row, "accepted_per_s", key.accepted_per_s.toFixed(1));
      setField(row, "strikes", String(key.strikes));
      setField(row, "budget", budget(key.budget));
      $('[data-action="pause"]', row).disabled = key.state === "paused" || OUT_OF_SERVICE.has(key.state);
      $('[data-action="resume"]', row).disabled = key.state !== "paused";
      $('[data-action="unpark"]', row).hidden = key.state !== "parked";
      $('[data-action="retire"]', row).disabled = key.state === "blocked" || key.state === "retired";
      $('[data-action="retire"]', row).hidden = key.fence !== undefined; // a group's key is retired on its members
    }
    for (const [id, row] of keyRows) {
      if (!seen.has(id)) {
        row.remove();
        keyRows.delete(id);
      }
    }
  }

  function showQueues(queues) {
    const tbody = $("#queues tbody");
    for (const row of tbody.rows) row.hidden = !(row.dataset.queue in queues);
    for (const [name, queue] of Object.entries(queues)) {
      let row = $(`#queues tr[data-queue="${CSS.escape(name)}"]`);
      if (!row) {
        row = document.createElement("tr");
        row.dataset.queue = name;
        row.append(cell("th", QUEUE_NAMES[name] ?? name), cell("td", "", "size"), cell("td", "", "oldest"));
        row.cells[0].scope = "row";
        tbody.append(row);
      }
      setField(row, "size", queue.size === null ? "–" : String(queue.size));
      setField(row, "oldest", seconds(queue.oldest_age_s));
    }
  }

  function showMembers(members) {
    $("#members-section").hidden = members === undefined;
    if (members === undefined) return;
    const rows = members.map((member) => {
      const row = document.createElement("tr");
      row.append(cell("th", member.name), cell("td", seconds(member.heartbeat_s)));
      row.cells[0].scope = "row";
      return row;
    });
    replaceRows($("#members tbody"), rows, "no member", 2);
  }

  function showOutcomes(outcomes) {
    const rows = Object.entries(outcomes).map(([name, count]) => {
      const row = document.createElement("tr");
      row.dataset.outcome = name;
      row.append(cell("th", name), cell("td", String(count), "count"));
      row.cells[0].scope = "row";
      return row;
    });
    replaceRows($("#outcomes tbody"), rows, "nothing yet", 2);
  }

  function showErrors(errors) {
    const rows = errors.map((error) => {
      const row = document.createElement("tr");
      row.append(cell("td", at(error.at)), cell("td", error.key), cell("td", error.request),
        cell("td", error.outcome), cell("td", error.detail));
      return row;
    });
    replaceRows($("#errors tbody"), rows, "no error so far", 5);
  }

  function showStatus(status) {
    const group = status.members !== undefined; // the cluster console: a member is drained with SIGTERM to it
    setField(document, "profile", status.profile ?? "–");
    setField(document, "delivery", status.delivery ?? "–");
    setField(document, "uptime", seconds(status.uptime_s));
    const state = status.draining ? "draining" : status.paused ? "paused" : "running";
    setField(document, "daemon-state", state);
    document.body.dataset.daemonState = state;
    $('[data-action="pause-daemon"]').disabled = status.paused || status.draining;
    $('[data-action="resume-daemon"]').disabled = !status.paused || status.draining;
    $('[data-action="drain"]').disabled = status.draining || group;
    $("#rate").textContent = status.accepted_per_s.toFixed(1);
    setField(document, "accepted_total", String(status.accepted_total ?? "–"));
    showMembers(status.members);
    showKeys(status.keys);
    showQueues(status.queues);
    showOutcomes(status.outcomes);
    showErrors(status.recent_errors);
    remember(status.accepted_per_s);
    drawChart();
  }

  // ---- the chart -----------------------------------------------------------------------------------------------

  function remember(value) {
    const now = Date.now() / 1000;
    rate.push({at: now, value});
    while (rate.length && rate[0].at < now - CHART_SPAN_S) rate.shift();
  }

  function drawChart() {
    const canvas = $("#rate-chart");
    const ratio = window.devicePixelRatio || 1;
    const width = canvas.clientWidth || canvas.width;
    const height = canvas.clientHeight || canvas.height;
    if (canvas.width !== Math.round(width * ratio)) canvas.width = Math.round(width * ratio);
    if (canvas.height !== Math.round(height * ratio)) canvas.height = Math.round(height * ratio);
    const context = canvas.getContext("2d");
    context.setTransform(ratio, 0, 0, ratio, 0, 0);
    context.clearRect(0, 0, width, height);

    const style = getComputedStyle(canvas);
    const peak = Math.max(1, ...rate.map((point) => point.value));
    const top = Math.ceil(peak * 1.1);
    const left = 40, bottom = height - 18, right = width - 8;
    const now = Date.now() / 1000;
    const span = Math.min(CHART_SPAN_S, Math.max(CHART_MIN_SPAN_S, now - (rate[0]?.at ?? now)));
    const x = (atSeconds) => right - ((now - atSeconds) / span) * (right - left);
    const y = (value) => bottom - (value / top) * (bottom - 8);

    context.strokeStyle = style.getPropertyValue("--grid").trim() || "#ccc";
    context.fillStyle = style.color;
    context.font = "11px system-ui, sans-serif";
    context.lineWidth = 1;
    context.beginPath();
    context.moveTo(left, 8);
    context.lineTo(left, bottom);
    context.lineTo(right, bottom);
    context.stroke();
    context.textAlign = "right";
    context.fillText(String(top), left - 4, 14);
    context.fillText("0", left - 4, bottom);
    context.textAlign = "left";
    context.fillText(`${Math.round(span / 60)} min ago`, left, height - 4);
    context.textAlign = "right";
    context.fillText("now", right, height - 4);

    if (rate.length > 1) {
      context.strokeStyle = style.getPropertyValue("--line").trim() || "#2563eb";
      context.lineWidth = 2;
      context.beginPath();
      rate.forEach((point, index) => (index ? context.lineTo : context.moveTo).call(context, x(point.at), y(point.value)));
      context.stroke();
    }
    canvas.dataset.points = String(rate.length);
    const last = rate.length ? rate[rate.length - 1].value : 0;
    canvas.setAttribute("aria-label",
      `Accepted per second over the last ${Math.round(span / 60)} min: now ${last.toFixed(1)}, at most ` +
      `${peak.toFixed(1)}`);
  }

  // ---- the dead letters ----------------------------------------------------------------------------------------

  function deadRow(item) {
    let row = deadRows.get(item.id);
    if (!row) {
      row = document.createElement("tr");
      row.dataset.deadId = item.id;
      row.append(cell("th", item.id, "id"), cell("td", "", "outcome"), cell("td", "", "detail"), cell("td", "", "at"),
        cell("td", "", "key"));
      row.cells[0].scope = "row";
      const actions = document.createElement("td");
      actions.append(button("Requeue", "requeue", {deadId: item.id}));
      row.append(actions);
    }
    const requeue = $('[data-action="requeue"]', row);
    requeue.dataset.outcome = item.outcome;
    requeue.disabled = Boolean(item.under_way) || item.requeuable === false;  // requeuable: the cluster console's
    requeue.title = item.under_way ? "Sent again already"
      : item.requeuable === false ? "Its request is not in the store: its dead record names no work entry"
      : "";
    setField(row, "outcome", item.outcome);
    setField(row, "detail", item.detail);
    setField(row, "at", at(item.at));
    setField(row, "key", item.key ?? "–");
    return row;
  }

  function deadQuery() {
    const query = new URLSearchParams({limit: String(DEAD_PAGE_SIZE)});
    if ($("#dead-outcome").value) query.set("outcome", $("#dead-outcome").value);
    const after = dead.cursors[dead.cursors.length - 1];
    if (after !== null) query.set("after", after);
    return query;
  }

  async function refreshDead() {
    const page = await getJson(`api/v1/dead?${deadQuery()}`);
    const rows = page.items.map(deadRow);
    deadRows.clear();
    rows.forEach((row) => deadRows.set(row.dataset.deadId, row));
    dead.next = page.next;
    replaceRows($("#dead tbody"), rows, "no dead letter", 6);
    $('[data-action="dead-next"]').disabled = page.next === null;
    $('[data-action="dead-first"]').disabled = dead.cursors.length === 1;
  }

  // ---- talking to the daemon -----------------------------------------------------------------------------------

  class Refused extends Error {}

  async function getJson(path) {
    const answer = await fetch(path, {cache: "no-store"});
    const body = await answer.json();
    if (!answer.ok) throw new Refused(body.error || `${answer.status} ${answer.statusText}`);
    return body;
  }

  function connection(state, text) {
    const element = $("#connection");
    element.dataset.state = state;
    if (element.textContent !== text) element.textContent = text;
  }

  function notice(text) {
    $("#notice").textContent = text;
  }

  // Calls load every everyMs; with whileShown, only while the tab is shown (and at once when it is shown again).
  function poll(load, everyMs, whileShown = false) {
    const step = async () => {
      if (whileShown && document.hidden) {
        setTimeout(step, everyMs);
        return;
      }
      try {
        await load();
      } catch (error) {
        connection("lost", `The daemon does not answer (${error.message}); trying again every second.`);
      }
      setTimeout(step, everyMs);
    };
    step();
  }

  async function loadStatus() {
    showStatus(await getJson("api/v1/status"));
    connection("live", `Live: updated ${clockTime(Date.now() / 1000)}`);
  }

  function askToken(reason) {
    $("#token-reason").textContent = reason;
    $("#token-form").hidden = false;
    $("#token-input").focus();
  }

  // Sends a command; without a token, or with one the daemon refuses (401), asks for it and sends the command once
  // it is given. Returns nothing: the outcome is shown in the notice line.
  async function command(path, body, done) {
    const token = sessionStorage.getItem(TOKEN_ITEM);
    if (!token) {
      pending = () => command(path, body, done);
      askToken("This needs the control token: the daemon printed the path of its token file at start-up.");
      return;
    }
    let answer;
    try {
      answer = await fetch(path, {
        method: "POST", cache: "no-store",
        headers: {"Authorization": `Bearer ${token}`, "Content-Type": "application/json"},
        body: JSON.stringify(body ?? {}),
      });
    } catch (error) {
      notice(`Not sent: the daemon does not answer (${error.message}).`);
      return;
    }
    const result = await answer.json().catch(() => ({}));
    if (answer.status === 401) {
      sessionStorage.removeItem(TOKEN_ITEM);
      pending = () => command(path, body, done);
      askToken("The daemon refused that token: enter it again.");
      return;
    }
    if (!answer.ok) {
      const partly = result.requeued ? ` (requeued ${result.requeued} before that: ${result.ids.join(", ")})` : "";
      notice(`Refused: ${result.error || answer.status}${partly}`);
      return;
    }
    notice(done(result));
    loadStatus().catch(() => {});
    refreshDead().catch(() => {});
  }

  // ---- the operator's actions ----------------------------------------------------------------------------------

  // The dead letters a requeue refused (their order may be at the exchange, and the daemon cannot ask), and why.
  const notRequeued = (result) => result.refused
    ? ` Not requeued: ${result.refused.join(", ")} (${result.refused_because}).` : "";

  const ACTIONS = {
    "pause": (target) => command(`api/v1/keys/${encodeURIComponent(target.dataset.keyId)}/pause`, null,
      (result) => `Key ${result.key}: ${result.state}.`),
    "resume": (target) => command(`api/v1/keys/${encodeURIComponent(target.dataset.keyId)}/resume`, null,
      (result) => `Key ${result.key}: ${result.state}.`),
    "unpark": (target) => command(`api/v1/keys/${encodeURIComponent(target.dataset.keyId)}/unpark`, null,
      (result) => `Key ${result.key}: ${result.state}, with a fresh strike budget for this run.`),
    // The last key that may send is retired only when the operator says so: the daemon then stops (exit code 3).
    "retire": (target) => {
      const id = target.dataset.keyId;
      const sending = [...keyRows.values()].filter((row) => !OUT_OF_SERVICE.has(row.dataset.state));
      const last = sending.length === 1 && sending[0].dataset.keyId === id;
      const question = last
        ? `Key ${id} is the last key that may send: retiring it stops the daemon (exit code 3). Retire it?`
        : `Retire key ${id} for the rest of this run? It finishes what it has in flight; the other keys take ` +
          "its work. Only a restart brings it back.";
      if (!window.confirm(question)) return;
      command(`api/v1/keys/${encodeURIComponent(id)}/retire`, {last},
        (result) => `Key ${result.key}: ${result.state}.`);
    },
    "pause-daemon": () => command("api/v1/pause", null, () => "The daemon takes no more work (in flight finishes)."),
    "resume-daemon": () => command("api/v1/resume", null, () => "The daemon takes work again."),
    "drain": () => $("#drain-dialog").showModal(),
    "requeue": (target) => {
      const risky = DOUBLE_RISK.has(target.dataset.outcome);
      if (risky && !confirmDoubleRisk(target.dataset.outcome)) return;
      command("api/v1/dead/requeue", {ids: [target.dataset.deadId], may_double: risky},
        (result) => `Requeued ${result.requeued}: ${result.ids.join(", ")}.${notRequeued(result)}`);
    },
    // No outcome chosen ("") asks for every one requeued by default (never unknown nor duplicate).
    "requeue-filtered": () => {
      const outcome = $("#dead-outcome").value;
      const risky = DOUBLE_RISK.has(outcome);
      if (risky && !confirmDoubleRisk(outcome)) return;
      command("api/v1/dead/requeue", {outcome, may_double: risky},
        (result) => `Requeued ${result.requeued} dead letters.${notRequeued(result)}`);
    },
    "dead-next": () => {
      dead.cursors.push(dead.next);
      refreshDead().catch((error) => notice(error.message));
    },
    "dead-first": () => {
      dead.cursors = [null];
      refreshDead().catch((error) => notice(error.message));
    },
  };

  function confirmDoubleRisk(outcome) {
    return window.confirm(`An ${outcome} request's order may be at the exchange already: sent again, it may be ` +
      "placed twice (unless the profile's [settle] asks the exchange first). Requeue anyway?");
  }

  document.addEventListener("visibilitychange", () => {
    if (!document.hidden) refreshDead().catch(() => {});
  });

  document.addEventListener("click", (event) => {
    const target = event.target.closest("button[data-action]");
    const action = target && ACTIONS[target.dataset.action];
    if (action) action(target);
  });

  $("#drain-dialog").addEventListener("close", () => {
    if ($("#drain-dialog").returnValue === "drain") {
      command("api/v1/drain", null, () => "Draining: the daemon finishes what is in flight and stops.");
    }
  });

  $("#dead-outcome").addEventListener("change", () => {
    dead.cursors = [null];
    refreshDead().catch((error) => notice(error.message));
  });

  $("#token-form").addEventListener("submit", (event) => {
    event.preventDefault();
    sessionStorage.setItem(TOKEN_ITEM, $("#token-input").value.trim());
    $("#token-input").value = "";
    $("#token-form").hidden = true;
    const next = pending;
    pending = null;
    if (next) next();
  });

  if (!sessionStorage.getItem(TOKEN_ITEM)) {
    askToken("Pausing, resuming, retiring, requeueing and draining need the control token: the daemon printed the " +
      "path of its token file at start-up (--control-token-file).");
  }
  poll(loadStatus, STATUS_EVERY_MS);
  poll(refreshDead, DEAD_EVERY_MS, true);
})();
