// capr search page. No framework, no build step: plain DOM calls. Text from the index is only ever
// inserted with textContent (never innerHTML), so a passage containing markup stays text.
"use strict";

const $ = (id) => document.getElementById(id);
const SVG = "http://www.w3.org/2000/svg";
const state = { filters: [], fields: new Set(), authReads: false };

function token() {
  return $("token").value.trim() || sessionStorage.getItem("capr-token") || "";
}

async function api(path, options = {}) {
  const headers = Object.assign({ Accept: "application/json" }, options.headers || {});
  const t = token();
  if (t) headers.Authorization = "Bearer " + t;
  if (options.body !== undefined) headers["Content-Type"] = "application/json";
  const res = await fetch(path, Object.assign({}, options, { headers }));
  let data = null;
  try { data = await res.json(); } catch (e) { data = null; }
  if (!res.ok) {
    const msg = data && (data.message || (typeof data.detail === "string" ? data.detail : null));
    const err = new Error(msg || `request failed (${res.status})`);
    err.status = res.status;
    throw err;
  }
  return data;
}

function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === "class") node.className = v;
    else if (k === "text") node.textContent = v;
    else node.setAttribute(k, v);
  }
  for (const c of children) node.append(c);
  return node;
}

function setStatus(text, isError = false, id = "status") {
  const s = $(id);
  s.textContent = text;
  s.classList.toggle("error", isError);
  s.setAttribute("role", isError ? "alert" : "status");
}

// ---------------------------------------------------------------------------- index info
async function loadInfo() {
  try {
    // /health answers 503 while the server loads its models (or when one failed to load), with the same JSON
    const res = await fetch("/health", { headers: { Accept: "application/json" } });
    const health = await res.json();
    if (health.status === "starting") {
      $("index-info").textContent = "The server is starting (loading its models)…";
      setTimeout(loadInfo, 1000);
      return;
    }
    if (!health.ready) throw new Error(health.error || `server not ready (${res.status})`);
    state.authReads = health.auth_reads;
    $("token-row").hidden = !health.auth_reads;
    if (health.auth_reads && !token()) {
      $("index-info").textContent = `${health.documents} documents · ${health.passages} passages — enter an API token to search`;
      return;
    }
    const stats = await api("/stats");
    $("index-info").textContent =
      `${stats.documents} documents · ${stats.passages} passages · ${stats.aspects} aspects · ${stats.generation}`;
    // The first choice sends no retriever: the server then searches exactly as `capr search` does by default
    // (its default retriever, and the second stage the index records).
    const retr = $("retriever");
    const names = { bm25: "BM25", tfidf: "TF-IDF", dense: "Dense", hybrid: "Hybrid (BM25 + dense)" };
    const byDefault = (names[stats.default_retriever] || stats.default_retriever) +
      (stats.default_reranker ? " + second stage" : "");
    const defaultOption = el("option", { value: "", text: "Default — " + byDefault });
    if (stats.default_reranker) defaultOption.title = "second stage: " + stats.default_reranker;
    retr.replaceChildren(defaultOption, ...stats.retrievers.map((r) => el("option", { value: r, text: names[r] || r })));
    retr.value = "";
    // no field chosen until the person picks one: a filter is never added to a search by default
    const ff = $("filter-field");
    ff.replaceChildren(el("option", { value: "", text: "choose a field" }),
      ...stats.fields.map((f) => el("option", { value: f, text: f })));
    ff.value = "";
    state.fields = new Set(stats.fields.map((f) => f.toLowerCase()));
  } catch (e) {
    $("index-info").textContent = "Could not reach the index: " + e.message;
  }
}

// ---------------------------------------------------------------------------- autocomplete
function debounce(fn, ms) {
  let t = null;
  return (...args) => { clearTimeout(t); t = setTimeout(() => fn(...args), ms); };
}

async function suggest(field) {
  const input = $(field);
  const list = $(field + "-options");
  try {
    const q = new URLSearchParams({ field, prefix: input.value.slice(0, 100), limit: "20" });
    const data = await api("/vocabulary?" + q.toString());
    list.replaceChildren(...data.values.map((v) => el("option", { value: v })));
  } catch (e) {
    list.replaceChildren();
  }
}

// ---------------------------------------------------------------------------- filters
// Each filter is sent as the text `capr search --filter` takes (charttime>=2150-01-01, category in (A, B)): the
// server parses it with the CLI's parser and names what it refuses, so the page only needs to tell a whole filter
// from a value of the chosen field. state.filters holds { clause: the text sent, shown: as typed, field, equality }.
const FIELD = "[A-Za-z_][A-Za-z0-9_.\\-]*";
const OPERATOR = "(>=|<=|!=|==|=|>|<)";
const STARTS_WITH_OPERATOR = new RegExp(`^(${OPERATOR}|(not\\s+)?in\\s*\\()`, "i");
const WHOLE_FILTER = new RegExp(`^(${FIELD})(\\s*${OPERATOR}|\\s+(not\\s+)?in\\s*\\()`, "i");

// The filter the field menu and the filter box describe; null for no filter, { error } for one that names no field.
function typedFilter() {
  const f = $("filter-field").value;
  const v = $("filter-value").value.trim();
  if (!v) return null;
  const whole = v.match(WHOLE_FILTER);
  // the field menu keeps its choice after a filter is added, so a whole filter typed next must win over it
  // (admitted>=2150-01-01 with "aspect" still chosen); but a value of the chosen field may look like one ("BP>140" as a
  // finding): it is a whole filter only when it starts with a field the index has
  if (whole && (!f || state.fields.has(whole[1].toLowerCase()) || whole[1].toLowerCase() === f.toLowerCase())) {
    return { clause: v, shown: v, field: whole[1], equality: ["=", "=="].includes(whole[3]) };
  }
  if (!f) {
    return { error: "Choose the field of the filter value, or type a whole filter such as charttime>=2150-01-01 " +
      "(or clear the value)." };
  }
  const op = v.match(STARTS_WITH_OPERATOR);
  if (op) {
    const clause = /^[<>=!]/.test(v) ? f + v : `${f} ${v}`;
    return { clause, shown: clause, field: f, equality: ["=", "=="].includes(op[2] || "") };
  }
  return { clause: `${f}=${v}`, shown: `${f} = ${v}`, field: f, equality: true };
}

function renderFilters() {
  $("filters").replaceChildren(...state.filters.map((flt, i) => {
    const remove = el("button", { type: "button", "aria-label": `Remove filter ${flt.shown}`, text: "×" });
    remove.addEventListener("click", () => { state.filters.splice(i, 1); renderFilters(); });
    return el("li", {}, flt.shown, remove);
  }));
}

// Adds the typed filter; returns why it cannot be added, or null. An equality replaces the earlier equality on its
// field (picking another value); ranges and sets add up, as two bounds make a window.
function addFilter() {
  const flt = typedFilter();
  if (!flt) return null;
  if (flt.error) return flt.error;
  const key = (x) => x.field.toLowerCase();
  state.filters = state.filters
    .filter((g) => g.clause.toLowerCase() !== flt.clause.toLowerCase() && !(flt.equality && g.equality && key(g) === key(flt)))
    .concat([flt]);
  $("filter-value").value = "";
  renderFilters();
  return null;
}

// Whether the typed filter (if any) was added; why not is said in the status line.
function addFilterFromForm() {
  const problem = addFilter();
  if (problem) {
    setStatus(problem, true);
    $("filter-field").focus();
  }
  return !problem;
}

// ---------------------------------------------------------------------------- results
// The server's offsets count Unicode code points (Python's string indices); a JS string counts UTF-16 units, in
// which a character beyond U+FFFF (an emoji, a mathematical letter such as 𝜇) takes two. unitsOf(text) maps a
// code-point offset in text to its UTF-16 offset (an offset outside text moves by as much as it lies outside).
function unitsOf(text) {
  if (!/[\uD800-\uDFFF]/.test(text)) return (i) => i;
  const at = [0];
  for (const ch of text) at.push(at[at.length - 1] + ch.length);
  const n = at.length - 1;
  return (i) => (i < 0 ? i : i > n ? text.length + (i - n) : at[i]);
}

// The passage text split at every sentence and highlight boundary; each piece knows whether it is
// in an evidence sentence (and which sentence) and whether it is a query term.
function passageNodes(r) {
  const text = r.text;
  const base = r.start;
  const u = unitsOf(text);
  const cuts = new Set([0, text.length]);
  const sents = (r.sentences || []).map((s, i) => ({ a: u(s.start - base), b: u(s.end - base), i, evidence: s.evidence }));
  const terms = r.highlights.map(([a, b]) => ({ a: u(a - base), b: u(b - base) }));
  for (const s of sents) { cuts.add(s.a); cuts.add(s.b); }
  for (const t of terms) { cuts.add(t.a); cuts.add(t.b); }
  const points = [...cuts].filter((x) => x >= 0 && x <= text.length).sort((x, y) => x - y);
  const nodes = [];
  for (let j = 0; j + 1 < points.length; j++) {
    const a = points[j], b = points[j + 1];
    const piece = text.slice(a, b);
    const sent = sents.find((s) => s.a <= a && b <= s.b);
    const isTerm = terms.some((t) => t.a <= a && b <= t.b);
    let node = isTerm ? el("strong", { class: "term", text: piece }) : document.createTextNode(piece);
    if (sent && sent.evidence) node = el("mark", { class: "evidence" }, node);
    if (sent) node = el("span", { class: "sent", "data-sent": String(sent.i) }, node);
    nodes.push(node);
  }
  return nodes;
}

function chart(r, passageEl) {
  const sents = r.sentences || [];
  if (!sents.length) return null;
  const max = Math.max(...sents.map((s) => s.score), 0);
  const bw = 10, gap = 3, h = 48;
  const width = sents.length * (bw + gap);
  const nEvidence = sents.filter((s) => s.evidence).length;
  const svg = document.createElementNS(SVG, "svg");
  svg.setAttribute("class", "chart-svg");
  svg.setAttribute("width", String(width));
  svg.setAttribute("height", String(h));
  svg.setAttribute("viewBox", `0 0 ${width} ${h}`);
  svg.setAttribute("role", "img");
  svg.setAttribute("aria-label",
    `Sentence scores: ${sents.length} sentences, ${nEvidence} evidence, highest ${max.toFixed(2)}`);
  sents.forEach((s, i) => {
    const bh = max > 0 ? Math.max(1, Math.round((s.score / max) * (h - 2))) : 1;
    const rect = document.createElementNS(SVG, "rect");
    rect.setAttribute("x", String(i * (bw + gap)));
    rect.setAttribute("y", String(h - bh));
    rect.setAttribute("width", String(bw));
    rect.setAttribute("height", String(bh));
    rect.setAttribute("data-score", String(s.score));
    if (s.evidence) rect.setAttribute("class", "evidence");
    const title = document.createElementNS(SVG, "title");
    title.textContent = `Sentence ${i + 1}: score ${s.score}${s.evidence ? " (evidence)" : ""}`;
    rect.append(title);
    // hovering a bar outlines its sentence in the passage
    const toggle = (on) => {
      rect.classList.toggle("hover", on);
      passageEl.querySelectorAll(`.sent[data-sent="${i}"]`).forEach((n) => n.classList.toggle("focus", on));
    };
    rect.addEventListener("mouseenter", () => toggle(true));
    rect.addEventListener("mouseleave", () => toggle(false));
    svg.append(rect);
  });
  return el("figure", { class: "chart" }, svg, el("figcaption", { class: "chart-caption", text: "sentence scores" }));
}

function renderResult(r) {
  const link = el("a", { href: r.document_url, class: "doc-link", text: r.title || r.doc_id });
  link.addEventListener("click", (ev) => { ev.preventDefault(); openDocument(r.doc_id, r.start, r.end); });
  const meta = el("p", { class: "meta" },
    el("span", { class: "badge aspect", text: r.aspect || "no aspect" }),
    el("span", { class: "score", text: `score ${r.score.toFixed(3)}` }),
    el("span", { class: "pid", text: r.pid }));
  const passage = el("p", { class: "passage" }, ...passageNodes(r));
  const body = el("div", { class: "body" }, passage);
  const c = chart(r, passage);
  if (c) body.append(c);
  return el("li", { class: "result", "data-doc-id": r.doc_id },
    el("article", { "aria-label": `Result ${r.rank}: ${r.title || r.doc_id}` }, el("h3", {}, link), meta, body));
}

// "BM25 : dense = 1 : 4": the shares a hybrid first stage fused with (a question of rare words gets 1 : 1)
function fusionText(fusion) {
  if (!fusion) return "";
  const { bm25, dense } = fusion.weights;
  if (!(bm25 > 0)) return ", dense only";
  const ratio = Math.round((dense / bm25) * 10) / 10;
  return `, BM25 : dense = 1 : ${ratio}`;
}

async function search(ev) {
  ev.preventDefault();
  // a filter typed but not added with "Add filter" is meant all the same: searching without it would show notes
  // the person filtered out (another patient's) as if they passed it
  if (!addFilterFromForm()) return;
  const body = {
    k: Number($("k").value),
    evidence: $("evidence").checked,
    filters: state.filters.map((f) => f.clause),
  };
  if ($("retriever").value) body.retriever = $("retriever").value;
  for (const f of ["entity", "aspect", "text"]) {
    const v = $(f).value.trim();
    if (v) body[f] = v;
  }
  if (!body.entity && !body.aspect && !body.text) {
    setStatus("Give an entity and/or an aspect, or a free-text question.", true);
    $("entity").focus();
    return;
  }
  if ($("token").value.trim()) sessionStorage.setItem("capr-token", $("token").value.trim());
  setStatus("Searching…");
  $("search-button").disabled = true;
  try {
    const data = await api("/search", { method: "POST", body: JSON.stringify(body) });
    $("results").replaceChildren(...data.results.map(renderResult));
    // what to know about these results (no passage mentions the entity, no section has the aspect): said with them
    const notes = data.notices && data.notices.length ? " — " + data.notices.join("; ") : "";
    // what the question was read as ("read 'valium' as diazepam"): said before the count
    const read = (data.reading || []).map((r) => `read '${r.text}' as ${r.read_as}`).join("; ");
    setStatus((read ? read + ". " : "") + (data.results.length
      ? `${data.results.length} passages in ${data.took_ms.toFixed(0)} ms (${data.retriever}${fusionText(data.fusion)}` +
        `${data.reranker ? " + second stage " + data.reranker : ""}` +
        `${data.evidence_method ? ", " + data.evidence_method + " evidence" : ""})`
      : "No matching passages.") + notes);
  } catch (e) {
    $("results").replaceChildren();
    setStatus(e.message, true);
  } finally {
    $("search-button").disabled = false;
  }
}

// ---------------------------------------------------------------------------- similar cases
// `text` with its [start, end) spans (code-point offsets) wrapped in <mark class="shared">.
function highlighted(text, spans) {
  const nodes = [];
  const u = unitsOf(text);
  let at = 0;
  for (const [a, b] of spans.map(([x, y]) => [u(x), u(y)]).sort((x, y) => x[0] - y[0])) {
    if (a < at || b > text.length) continue;
    if (a > at) nodes.push(document.createTextNode(text.slice(at, a)));
    nodes.push(el("mark", { class: "shared", text: text.slice(a, b) }));
    at = b;
  }
  if (at < text.length) nodes.push(document.createTextNode(text.slice(at)));
  return nodes;
}

function renderDiagnosis(d) {
  const item = el("li", { class: "diagnosis", "data-kind": d.kind });
  if (d.code) item.append(el("span", { class: "code", text: d.code }), " ");
  item.append(el("span", { class: "name", text: d.name || "(no ICD-10-CM name)" }));
  if (d.kind === "mention" && d.mention && d.mention.toLowerCase() !== d.name.toLowerCase()) {
    item.append(el("span", { class: "mention muted", text: ` (“${d.mention}” in the text)` }));
  }
  return item;
}

function renderCase(c) {
  const found = c.evidence.length ? c.text.indexOf(c.evidence[0].sentence) : -1;
  // openDocument takes the server's code-point offsets; indexOf counts UTF-16 units
  const points = (s) => Array.from(s).length;
  const first = found >= 0 ? points(c.text.slice(0, found)) : -1;
  const link = el("a", { href: c.document_url, class: "doc-link", text: c.doc_id });
  link.addEventListener("click", (ev) => {
    ev.preventDefault();
    // the document opens with the case's best evidence sentence marked
    openDocument(c.doc_id, Math.max(first, 0), first >= 0 ? first + points(c.evidence[0].sentence) : 0);
  });
  const meta = el("p", { class: "meta" },
    el("span", { class: "badge source", text: c.source || "case" }),
    el("span", { class: "badge", text: c.labelled ? "coded" : "not coded" }),
    el("span", { class: "score", text: `score ${c.score.toFixed(3)}` }));
  const dxHead = c.labelled ? "Diagnoses (the case's codes)" : "Diagnoses its text mentions";
  const dx = c.diagnoses.length
    ? el("ul", { class: "diagnoses", "aria-label": dxHead }, ...c.diagnoses.map(renderDiagnosis))
    : el("p", { class: "muted", text: "No diagnosis found." });
  const evidence = el("ul", { class: "case-evidence", "aria-label": "Why it is similar" },
    ...c.evidence.map((e) => el("li", { class: "pair" },
      el("p", { class: "case-sentence" }, ...highlighted(e.sentence, e.highlights)),
      el("p", { class: "query-sentence" }, el("span", { class: "muted", text: "your description: " }),
        el("span", { class: "text" }, ...highlighted(e.query_sentence, e.query_highlights))))));
  return el("li", { class: "case", "data-doc-id": c.doc_id },
    el("article", { "aria-label": `Case ${c.rank}: ${c.doc_id}` }, el("h3", {}, link), meta,
      el("h4", { text: dxHead }), dx,
      ...(c.evidence.length ? [el("h4", { text: "Why it is similar" }), evidence] : [])));
}

function renderFindingEvidence(e) {
  return el("li", { class: e.negated ? "against" : "for" },
    el("span", { class: "sign", text: e.negated ? "−" : "+" }), " ",
    el("span", { class: "finding", text: e.negated ? `no ${e.finding}` : e.finding }), ": ",
    el("q", { class: "sentence", text: e.sentence }), " ",
    el("span", { class: "muted", text: `(${e.doc_id})` }));
}

function renderLikely(d) {
  const head = el("p", { class: "dx-head" });
  if (d.code) head.append(el("span", { class: "code", text: d.code }), " ");
  head.append(el("span", { class: "name", text: d.name }));
  if (d.kind !== "diagnosis") head.append(el("span", { class: "badge", text: `${d.kind}, not a diagnosis` }));
  if (d.cases) head.append(el("span", { class: "muted", text: ` — in ${d.cases} of the similar coded cases` }));
  const evidence = [...d.supporting, ...d.against];
  return el("li", { class: "diagnosis likely", "data-kind": d.kind, "data-code": d.code || "" }, head,
    ...(evidence.length ? [el("ul", { class: "dx-evidence", "aria-label": `Findings for and against ${d.name}` },
      ...evidence.map(renderFindingEvidence))] : []));
}

function renderFinding(f) {
  return el("li", { class: f.negated ? "denied" : "affirmed", "data-kind": f.kind },
    f.negated ? `no ${f.text}` : (f.kind === "lab" && f.concept ? `${f.concept} (${f.text})` : f.text));
}

const setCasesStatus = (text, isError = false) => setStatus(text, isError, "cases-status");

async function findCases(ev) {
  ev.preventDefault();
  const description = $("case-description").value.trim();
  if (!description) {
    setCasesStatus("Describe the patient first.", true);
    $("case-description").focus();
    return;
  }
  if ($("token").value.trim()) sessionStorage.setItem("capr-token", $("token").value.trim());
  const body = { description, k: Number($("case-k").value), labelled_only: $("case-labelled").checked };
  setCasesStatus("Searching…");
  $("cases-button").disabled = true;
  try {
    const data = await api("/cases/similar", { method: "POST", body: JSON.stringify(body) });
    const findings = data.findings ? data.findings.findings : [];
    $("finding-list").replaceChildren(...findings.map(renderFinding));
    $("patient-findings").hidden = !findings.length;
    $("likely-diagnoses").replaceChildren(...data.diagnoses.map(renderLikely));
    $("likely").hidden = !data.diagnoses.length;
    const codes = data.codes || [];
    $("likely-codes").replaceChildren(...codes.map((c) => el("li", { "data-code": c.code },
      `${c.code} ${c.name}` + (c.cases ? ` (carried by ${c.cases} of the 20 most similar coded cases)` : ""))));
    $("codes").hidden = !codes.length;
    $("cases").replaceChildren(...data.cases.map(renderCase));
    const notes = data.notices.length ? " — " + data.notices.join("; ") : "";
    setCasesStatus((data.cases.length
      ? `${data.cases.length} similar cases in ${data.took_ms.toFixed(0)} ms (${data.retriever})`
      : "No similar case found.") + notes);
  } catch (e) {
    $("cases").replaceChildren();
    $("likely-diagnoses").replaceChildren();
    $("likely").hidden = true;
    $("likely-codes").replaceChildren();
    $("codes").hidden = true;
    $("finding-list").replaceChildren();
    $("patient-findings").hidden = true;
    setCasesStatus(e.message, true);
  } finally {
    $("cases-button").disabled = false;
  }
}

function showView(name) {
  for (const [tab, view] of [["tab-search", "search-view"], ["tab-cases", "cases-view"]]) {
    const on = view === name;
    $(view).hidden = !on;
    $(tab).setAttribute("aria-selected", String(on));
    $(tab).tabIndex = on ? 0 : -1;
  }
}

// ---------------------------------------------------------------------------- document view
async function openDocument(docId, start, end) {
  try {
    const d = await api("/documents/" + encodeURIComponent(docId));
    $("doc-title").textContent = d.title || d.doc_id;
    $("doc-meta").textContent = d.doc_id;
    const text = d.text;
    const u = unitsOf(text);
    start = u(start);
    end = u(end);
    $("doc-text").replaceChildren(
      document.createTextNode(text.slice(0, start)),
      el("mark", { id: "doc-passage", text: text.slice(start, end) }),
      document.createTextNode(text.slice(end)));
    const sec = $("document");
    sec.hidden = false;
    sec.focus();
    $("doc-passage").scrollIntoView({ block: "center" });
  } catch (e) {
    // not the document asked for: the one open before must not stay (it would read as this one), and the reason
    // is said in the view the person is in
    $("document").hidden = true;
    setStatus(e.message, true, $("cases-view").hidden ? "status" : "cases-status");
  }
}

// ---------------------------------------------------------------------------- wiring
document.addEventListener("DOMContentLoaded", () => {
  $("search-form").addEventListener("submit", search);
  $("cases-form").addEventListener("submit", findCases);
  $("tab-search").addEventListener("click", () => showView("search-view"));
  $("tab-cases").addEventListener("click", () => showView("cases-view"));
  $("add-filter").addEventListener("click", addFilterFromForm);
  $("filter-value").addEventListener("keydown", (ev) => { if (ev.key === "Enter") { ev.preventDefault(); addFilterFromForm(); } });
  $("close-doc").addEventListener("click", () => { $("document").hidden = true; $("results").focus(); });
  for (const f of ["entity", "aspect"]) {
    const run = debounce(() => suggest(f), 150);
    $(f).addEventListener("input", run);
    $(f).addEventListener("focus", run);
  }
  $("token").addEventListener("change", () => {
    sessionStorage.setItem("capr-token", $("token").value.trim());
    loadInfo();
  });
  const saved = sessionStorage.getItem("capr-token");
  if (saved) $("token").value = saved;
  loadInfo();
});
