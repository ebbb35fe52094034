// The page of `graphrag-pipeline serve`: ask, read the result with its sources, see its graph.
// Everything shown is built with textContent (no HTML from the index is ever interpreted).
"use strict";

const $ = (id) => document.getElementById(id);
const state = { auth: false, lastResult: null };

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "onclick") node.addEventListener("click", (e) => { e.preventDefault(); v(e); });
    else if (k === "class") node.className = v;
    else node.setAttribute(k, v);
  }
  for (const c of children) if (c !== null && c !== undefined) node.append(c instanceof Node ? c : String(c));
  return node;
}

function say(text, isError) {
  $("status").textContent = text || "";
  $("status").className = isError ? "error" : "";
}

async function api(path, options) {
  const headers = Object.assign({ Accept: "application/json" }, (options && options.headers) || {});
  const key = $("api-key").value;
  if (key) headers["X-API-Key"] = key;
  const res = await fetch(path, Object.assign({}, options || {}, { headers }));
  let body = null;
  try { body = await res.json(); } catch (_) { body = null; }
  if (!res.ok) {
    let detail = body && body.detail;
    if (Array.isArray(detail)) detail = detail.map((d) => `${(d.loc || []).slice(1).join(".")}: ${d.msg}`).join("; ");
    throw new Error(`${res.status}: ${detail || res.statusText}`);
  }
  return body;
}

// -- the graph (cytoscape.js, vendored in static/) ---------------------------------------------------------------
const TYPE_COLOURS = { PERSON: "#2f6fdf", ORGANIZATION: "#d9822b", GEO: "#2e9e6a", EVENT: "#b3261e", CATEGORY: "#8e44ad" };
const cy = cytoscape({
  container: $("graph"),
  style: [
    { selector: "node", style: {
      "background-color": (n) => TYPE_COLOURS[n.data("type")] || "#7a8396",
      label: "data(label)", "font-size": 10, color: "#1d2330", "text-valign": "bottom", "text-margin-y": 3,
      width: "mapData(weight, 0, 1, 14, 34)", height: "mapData(weight, 0, 1, 14, 34)" } },
    { selector: "node.hit", style: { "border-width": 3, "border-color": "#1d2330" } },
    { selector: "edge", style: {
      width: "mapData(weight, 0, 1, 1, 5)", "line-color": "#b9c3d6", "curve-style": "bezier" } },
    { selector: ":selected", style: { "border-width": 3, "border-color": "#f2b705", "line-color": "#f2b705" } },
  ],
  wheelSensitivity: 0.3,
});
window.cy = cy; // for tests and the curious

const nodeId = (name) => "n:" + String(name).toLocaleLowerCase();

function addNode(name, type, weight, hit) {
  const id = nodeId(name);
  let node = cy.getElementById(id);
  if (node.empty()) node = cy.add({ group: "nodes", data: { id, label: name, name, type: type || "", weight: weight || 0.2 } });
  else if (type && !node.data("type")) node.data("type", type);
  if (hit) node.addClass("hit");
  return node;
}

function addEdge(source, target, description, weight) {
  const a = nodeId(source), b = nodeId(target);
  const id = "e:" + [a, b].sort().join("|");
  if (cy.getElementById(id).empty()) cy.add({ group: "edges", data: { id, source: a, target: b, description, weight } });
}

function relayout() {
  cy.layout({ name: "cose", animate: false, nodeDimensionsIncludeLabels: true, padding: 20 }).run();
}

function drawGraph(result) {
  cy.elements().remove();
  const ents = result.entities || [];
  const top = Math.max(1e-12, ...ents.map((e) => e.score || 0));
  for (const e of ents) addNode(e.name, e.type, 0.3 + 0.7 * ((e.score || 0) / top), true);
  const rels = result.relations || [];
  const topRel = Math.max(1e-12, ...rels.map((r) => r.score || 0));
  for (const r of rels) {
    addNode(r.source); addNode(r.target);
    addEdge(r.source, r.target, r.description, 0.2 + 0.8 * ((r.score || 0) / topRel));
  }
  relayout();
}

cy.on("tap", "node", (evt) => showEntity(evt.target.data("name")));
cy.on("tap", "edge", (evt) => {
  const d = evt.target.data();
  showDetail(el("div", {}, el("h2", {}, `${cy.getElementById(d.source).data("name")} — ${cy.getElementById(d.target).data("name")}`),
    el("p", { class: "desc" }, d.description || "")));
});

// -- sources ------------------------------------------------------------------------------------------------------
// a result item may carry `sources`: chunk ids, or objects with chunk_id / doc / position / text
function sourceLinks(item) {
  const sources = item && item.sources;
  if (!Array.isArray(sources) || !sources.length) return null;
  const box = el("div", { class: "sources" }, "sources: ");
  sources.forEach((s, i) => {
    const src = typeof s === "string" ? { chunk_id: s } : (s || {});
    const where = src.pages ? ` p. ${src.pages}` : (src.position !== undefined ? " #" + src.position : "");
    const label = src.doc ? `${src.doc}${where}` : (src.chunk_id || `source ${i + 1}`);
    box.append(el("a", { class: "source", href: "#", onclick: () => showSource(src) }, label));
  });
  return box;
}

function showDetail(node) {
  $("detail").replaceChildren(node);
}

async function showSource(src) {
  if (src.text && !src.chunk_id) {
    showDetail(el("div", {}, el("h2", {}, src.doc || "source"), el("pre", {}, src.text)));
    return;
  }
  try {
    const c = await api(`chunks/${encodeURIComponent(src.chunk_id)}`);
    showDetail(el("div", {}, el("h2", {}, `${c.doc} #${c.position}`),
      c.docs && c.docs.length > 1 ? el("p", { class: "muted" }, `also in: ${c.docs.join(", ")}`) : null,
      el("pre", { class: "chunk-text" }, c.text)));
  } catch (err) { say(`could not load the source: ${err.message}`, true); }
}

async function showEntity(name) {
  try {
    const d = await api(`entities/${encodeURIComponent(name)}?neighbours=25`);
    const e = d.entity;
    const neighbours = el("ul", {});
    for (const r of d.relations) {
      const other = r.source.toLocaleLowerCase() === e.name.toLocaleLowerCase() ? r.target : r.source;
      neighbours.append(el("li", {}, el("a", { class: "entity", href: "#", onclick: () => showEntity(other) }, other),
        " ", el("span", { class: "score" }, `weight ${r.weight}`), el("div", { class: "desc" }, r.description)));
    }
    const sources = el("div", { class: "sources" });
    for (const s of d.sources) sources.append(el("a", { class: "source", href: "#", onclick: () => showSource(s) }, `${s.doc} ${s.pages ? "p. " + s.pages : "#" + s.position}`));
    const expand = el("button", { type: "button", onclick: () => {
      addNode(e.name, e.type, 0.5);
      for (const n of d.neighbours) addNode(n.name, n.type, 0.2);
      for (const r of d.relations) addEdge(r.source, r.target, r.description, 0.3);
      relayout();
    } }, "add neighbours to the graph");
    showDetail(el("div", {}, el("h2", {}, e.name, " ", el("span", { class: "type" }, e.type)),
      el("p", { class: "desc" }, e.description || ""),
      el("h2", {}, "Sources"), sources,
      el("h2", {}, `Relations (${d.relations.length})`), expand, neighbours));
    cy.$(":selected").unselect();
    cy.getElementById(nodeId(e.name)).select();
  } catch (err) { say(`could not load ${name}: ${err.message}`, true); }
}

// -- results ------------------------------------------------------------------------------------------------------
function fill(boxId, listId, items, render) {
  const list = $(listId);
  list.replaceChildren(...items.map(render));
  $(boxId).hidden = items.length === 0;
}

function score(x) { return x === undefined || x === null ? "" : ` ${Number(x).toPrecision(3)}`; }

function showResult(result) {
  state.lastResult = result;
  $("answer-box").hidden = !result.answer;
  $("answer").textContent = result.answer || "";
  fill("entities-box", "entities", result.entities || [], (e) => el("li", {},
    el("a", { class: "entity", href: "#", onclick: () => showEntity(e.name) }, e.name), " ",
    el("span", { class: "type" }, e.type), el("span", { class: "score" }, score(e.score)),
    el("div", { class: "desc" }, e.description || ""), sourceLinks(e)));
  fill("relations-box", "relations", result.relations || [], (r) => el("li", {},
    el("a", { class: "entity", href: "#", onclick: () => showEntity(r.source) }, r.source), " — ",
    el("a", { class: "entity", href: "#", onclick: () => showEntity(r.target) }, r.target),
    el("span", { class: "score" }, score(r.score)), el("div", { class: "desc" }, r.description || ""), sourceLinks(r)));
  fill("reports-box", "reports", result.community_reports || [], (c) => el("li", {},
    el("strong", {}, c.title), el("span", { class: "score" }, ` rating ${c.rating}${score(c.score)}`),
    el("div", { class: "desc" }, c.summary || ""), sourceLinks(c)));
  fill("chunks-box", "chunks", result.chunks || [], (c) => el("li", {},
    el("a", { class: "source", href: "#", onclick: () => showSource(c.chunk_id ? c : { doc: c.doc, text: c.text }) }, c.doc),
    el("span", { class: "score" }, score(c.score)),
    el("div", { class: "desc" }, (c.text || "").slice(0, 300) + ((c.text || "").length > 300 ? "…" : "")), sourceLinks(c)));
  $("context-box").hidden = !result.context;
  $("context").textContent = result.context || "";
  drawGraph(result);
}

async function ask(evt) {
  evt.preventDefault();
  const question = $("question").value.trim();
  if (!question) return;
  const mode = $("mode").value;
  $("ask-button").disabled = true;
  say("searching…");
  const started = performance.now();
  try {
    const result = await api("query", {
      method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify({ question, mode }),
    });
    showResult(result);
    const n = (result.entities || []).length + (result.relations || []).length + (result.community_reports || []).length + (result.chunks || []).length;
    say(`${n} results (${result.mode}) in ${Math.round(performance.now() - started)} ms`);
    document.body.dataset.answered = String(Date.now());
  } catch (err) {
    say(err.message, true);
  } finally {
    $("ask-button").disabled = false;
    document.body.dataset.done = String(performance.now()); // answered or failed: for tests
  }
}

async function start() {
  $("ask").addEventListener("submit", ask);
  $("api-key").value = sessionStorage.getItem("graphrag-api-key") || "";
  $("api-key").addEventListener("change", () => sessionStorage.setItem("graphrag-api-key", $("api-key").value));
  try {
    const h = await fetch("health").then((r) => r.json());
    state.auth = !!h.auth;
    $("api-key").hidden = !h.auth;
    if (Array.isArray(h.modes)) {
      const current = $("mode").value;
      $("mode").replaceChildren(...h.modes.map((m) => el("option", {}, m)));
      if (h.modes.includes(current)) $("mode").value = current;
    }
    if (h.index) {
      const c = h.index.counts || {};
      $("index-info").textContent = `${h.index.backend} index v${h.index.index_version ?? "?"}: ${c.entities ?? "?"} entities, ${c.relations ?? "?"} relations, ${c.chunks ?? "?"} chunks`;
    } else if (h.detail) say(h.detail, true);
  } catch (err) { say(`the server did not answer: ${err.message}`, true); }
  const q = new URLSearchParams(location.search).get("q");
  if (q) { $("question").value = q; $("ask").requestSubmit(); }
  document.body.dataset.ready = "1";
}

start();
