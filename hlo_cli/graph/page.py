"""The style sheet and the script of the HTML page (render.to_html): ours, no library.

The script reads the page's JSON (`#hlo-graph-data`: nodes keyed by their DOT names n0, n1, ...,
whose SVG elements carry those ids) and gives the SVG laid out by dot:

* pan (drag) and zoom (wheel, +/-, `f` fits), by changing the SVG's viewBox;
* a click on a ghost (a far operand's copy, render.to_dot) goes to the operand;
* search by name, opcode or op_name (else a computation's name: its nodes): matches are highlighted
  and listed, Enter jumps to the next;
* details of a clicked node: opcode, shape, attributes, op_name, source, the HLO line, inputs and
  outputs (each a link that jumps to that node), and every overlay's values;
* an overlay selector that recolours the nodes and redraws the legend.

Without a layout (no SVG in the page), search and details work on the list of nodes.
"""

PAGE_CSS = r"""
html,body{margin:0;height:100%;font-family:Helvetica,Arial,sans-serif;font-size:13px;color:#222}
#bar{display:flex;gap:8px;align-items:center;padding:6px 10px;border-bottom:1px solid #ccc;background:#f7f7f7;height:28px}
#title{font-weight:bold;white-space:nowrap;overflow:hidden;text-overflow:ellipsis;max-width:40%}
#search{flex:1;min-width:160px;padding:3px 6px}
#count{color:#555;min-width:70px}
#overlay{max-width:220px}
#main{display:flex;height:calc(100% - 41px)}
#view{flex:1;overflow:hidden;position:relative;background:#fff;cursor:grab}
#view.drag{cursor:grabbing}
#view>svg{width:100%;height:100%;display:block}
#view.nolayout{overflow:auto;cursor:auto;padding:10px}
#view .msg{background:#fff4d6;border:1px solid #e0c060;padding:8px;margin-bottom:8px}
#view pre{font-size:11px;white-space:pre-wrap}
#side{width:360px;border-left:1px solid #ccc;overflow:auto;padding:8px;background:#fcfcfc}
#side h3{margin:4px 0 6px 0;font-size:14px;word-break:break-all}
#side table{border-collapse:collapse;width:100%}
#side td{vertical-align:top;padding:2px 4px;border-bottom:1px solid #eee;word-break:break-all}
#side td.k{color:#555;white-space:nowrap;width:30%}
#side .hint{color:#666}
#legend .sw{display:inline-block;width:14px;height:12px;border:1px solid #999;margin-right:6px;vertical-align:middle}
#legend div{margin:2px 0}
#results a,#details a{color:#0645ad;cursor:pointer;text-decoration:none}
#results a:hover,#details a:hover{text-decoration:underline}
#results div{padding:1px 0}
.node.hl path,.node.hl polygon,.node.hl ellipse{stroke:#1a73e8;stroke-width:4px}
.node.sel path,.node.sel polygon,.node.sel ellipse{stroke:#ff6d00;stroke-width:5px}
.node{cursor:pointer}
"""

PAGE_JS = r"""
(function(){
"use strict";
var data = JSON.parse(document.getElementById("hlo-graph-data").textContent);
var view = document.getElementById("view");
var svg = view.querySelector("svg");
var side = document.getElementById("details");
var results = document.getElementById("results");
var legendBox = document.getElementById("legend");
var search = document.getElementById("search");
var countBox = document.getElementById("count");
var select = document.getElementById("overlay");
var els = {};           // DOT name -> its <g> in the SVG
var vb = null, full = null;
function esc(s){ return String(s).replace(/[&<>"]/g, function(c){
  return {"&":"&amp;","<":"&lt;",">":"&gt;","\"":"&quot;"}[c]; }); }

if (svg) {
  var gs = svg.querySelectorAll("g.node");
  var ghosts = [];       // gh<k>_<n>: a copy of node <n> drawn next to a far user; a click goes to <n>
  for (var i = 0; i < gs.length; i++) {
    if (data.nodes[gs[i].id]) els[gs[i].id] = gs[i];
    else { var gm = /^gh\d+_(n\d+)$/.exec(gs[i].id); if (gm && data.nodes[gm[1]]) ghosts.push([gs[i], gm[1]]); }
  }
  var v = (svg.getAttribute("viewBox") || "").split(/[\s,]+/).map(Number);
  if (v.length === 4 && v[2] > 0) { full = {x:v[0], y:v[1], w:v[2], h:v[3]}; }
  else { var b = svg.getBBox(); full = {x:b.x, y:b.y, w:b.width, h:b.height}; }
  svg.removeAttribute("width"); svg.removeAttribute("height");
  svg.setAttribute("preserveAspectRatio", "xMidYMid meet");
  vb = {x:full.x, y:full.y, w:full.w, h:full.h};
  setView();
}
function setView(){ svg.setAttribute("viewBox", vb.x + " " + vb.y + " " + vb.w + " " + vb.h); }
function fit(){ if (!svg) return; vb = {x:full.x, y:full.y, w:full.w, h:full.h}; setView(); }
function toSvg(cx, cy){
  var r = svg.getBoundingClientRect();
  var s = Math.max(vb.w / r.width, vb.h / r.height);
  var ox = vb.x - (r.width * s - vb.w) / 2, oy = vb.y - (r.height * s - vb.h) / 2;
  return {x: ox + (cx - r.left) * s, y: oy + (cy - r.top) * s, s: s};
}
function zoom(f, cx, cy){
  if (!svg) return;
  var r = svg.getBoundingClientRect();
  if (cx === undefined) { cx = r.left + r.width / 2; cy = r.top + r.height / 2; }
  var p = toSvg(cx, cy);
  var w = vb.w * f, h = vb.h * f;
  if (w > full.w * 20 || w < 5) return;
  vb = {x: p.x - (p.x - vb.x) * f, y: p.y - (p.y - vb.y) * f, w: w, h: h};
  setView();
}
if (svg) {
  view.addEventListener("wheel", function(ev){
    ev.preventDefault(); zoom(ev.deltaY > 0 ? 1.15 : 1 / 1.15, ev.clientX, ev.clientY); }, {passive:false});
  var drag = null;
  view.addEventListener("mousedown", function(ev){
    if (ev.button !== 0) return;
    drag = {x: ev.clientX, y: ev.clientY, vx: vb.x, vy: vb.y, moved: false}; view.classList.add("drag"); });
  window.addEventListener("mousemove", function(ev){
    if (!drag) return;
    var s = toSvg(0, 0).s, dx = ev.clientX - drag.x, dy = ev.clientY - drag.y;
    if (Math.abs(dx) + Math.abs(dy) > 3) drag.moved = true;
    vb.x = drag.vx - dx * s; vb.y = drag.vy - dy * s; setView(); });
  window.addEventListener("mouseup", function(){ view.classList.remove("drag");
    setTimeout(function(){ drag = null; }, 0); });
  Object.keys(els).forEach(function(k){
    els[k].addEventListener("click", function(ev){
      if (drag && drag.moved) return; ev.stopPropagation(); show(k, false); });
  });
  ghosts.forEach(function(g){
    g[0].addEventListener("click", function(ev){
      if (drag && drag.moved) return; ev.stopPropagation(); show(g[1], true); });
  });
}
document.getElementById("fit").onclick = fit;
document.getElementById("zin").onclick = function(){ zoom(1 / 1.4); };
document.getElementById("zout").onclick = function(){ zoom(1.4); };
document.addEventListener("keydown", function(ev){
  if (ev.target === search) return;
  if (ev.key === "f") fit(); else if (ev.key === "+" || ev.key === "=") zoom(1 / 1.4);
  else if (ev.key === "-") zoom(1.4); else if (ev.key === "/") { ev.preventDefault(); search.focus(); }
});

function centre(k){
  var el = els[k]; if (!el || !svg) return;
  var b = el.getBBox(), m = svg.getScreenCTM().inverse().multiply(el.getScreenCTM());
  var x = m.a * (b.x + b.width / 2) + m.c * (b.y + b.height / 2) + m.e;
  var y = m.b * (b.x + b.width / 2) + m.d * (b.y + b.height / 2) + m.f;
  var w = Math.min(full.w, Math.max(b.width * m.a * 6, 700)), h = w * (vb.h / vb.w);
  vb = {x: x - w / 2, y: y - h / 2, w: w, h: h}; setView();
}
var selected = null;
function show(k, jump){
  var n = data.nodes[k]; if (!n) return;
  if (selected && els[selected]) els[selected].classList.remove("sel");
  selected = k; if (els[k]) els[k].classList.add("sel");
  if (jump) centre(k);
  var rows = [];
  function row(a, b){ if (b !== null && b !== undefined && b !== "" ) rows.push("<tr><td class=k>" + esc(a) + "</td><td>" + b + "</td></tr>"); }
  row("opcode", esc(n.opcode)); row("shape", esc(n.shape)); row("computation", esc(n.group));
  row("op_name", n.op_name ? esc(n.op_name) : null); row("source", n.source ? esc(n.source) : null);
  if (n.stack && n.stack.length > 1) row("stack", n.stack.map(esc).join("<br>"));
  row("HLO text", esc(n.location)); if (n.root) row("root", "yes");
  Object.keys(n.attributes).forEach(function(a){ row(a, esc(n.attributes[a])); });
  Object.keys(n.inline_operands).forEach(function(i){ row("operand " + i, esc(n.inline_operands[i]) + " (constant)"); });
  n.applies.forEach(function(a){ row("applies", esc(a)); });
  if (n.fused) row("fused", esc(n.fused.size + " instructions of " + n.fused.computation + ": " +
      Object.keys(n.fused.opcodes).map(function(o){ return o + "\u00d7" + n.fused.opcodes[o]; }).join(", ")));
  if (n.hidden) row("not drawn", esc(n.hidden.inputs + " inputs, " + n.hidden.outputs + " outputs (--depth)"));
  function links(list){ return list.map(function(e){ var o = data.nodes[e[0]];
    return "<a data-k=\"" + e[0] + "\">" + esc(o ? o.name : e[0]) + "</a>" + (e[2] ? " <small>" + esc(e[2]) + "</small>" : "")
      + (e[1] !== "data" ? " <small>(" + esc(e[1]) + ")</small>" : ""); }).join("<br>"); }
  if (n.inputs.length) row("inputs", links(n.inputs));
  if (n.outputs.length) row("outputs", links(n.outputs));
  var vals = n.values || {};
  Object.keys(vals).forEach(function(ov){
    rows.push("<tr><td colspan=2><b>" + esc(ov) + "</b></td></tr>");
    Object.keys(vals[ov]).forEach(function(m){ row(m, esc(vals[ov][m])); });
  });
  side.innerHTML = "<h3>" + esc(n.name) + "</h3><table>" + rows.join("") + "</table>";
  var as = side.querySelectorAll("a[data-k]");
  for (var i = 0; i < as.length; i++) as[i].onclick = function(){ show(this.getAttribute("data-k"), true); };
}

var matches = [], at = -1;
function runSearch(){
  var q = search.value.trim().toLowerCase();
  Object.keys(els).forEach(function(k){ els[k].classList.remove("hl"); });
  matches = []; at = -1;
  if (!q) { countBox.textContent = ""; results.innerHTML = ""; if (!svg) listAll(); return; }
  Object.keys(data.nodes).forEach(function(k){
    var n = data.nodes[k];
    if (n.name.toLowerCase().indexOf(q) >= 0 || n.opcode.toLowerCase().indexOf(q) >= 0 ||
        (n.op_name && n.op_name.toLowerCase().indexOf(q) >= 0)) matches.push(k);
  });
  if (!matches.length) {   // a computation's name: its nodes
    Object.keys(data.nodes).forEach(function(k){
      var n = data.nodes[k];
      if (n.computation.toLowerCase() === q || n.group.toLowerCase().indexOf(q) >= 0) matches.push(k); });
  }
  matches.sort(function(a, b){
    var ea = data.nodes[a].name.toLowerCase() === q ? 0 : 1, eb = data.nodes[b].name.toLowerCase() === q ? 0 : 1;
    return ea - eb; });
  matches.forEach(function(k){ if (els[k]) els[k].classList.add("hl"); });
  countBox.textContent = matches.length + " found";
  results.innerHTML = "<b>found</b>" + matches.slice(0, 200).map(function(k){
    return "<div><a data-k=\"" + k + "\">" + esc(data.nodes[k].name) + "</a> <small>" + esc(data.nodes[k].opcode) + "</small></div>";
  }).join("") + (matches.length > 200 ? "<div>... " + (matches.length - 200) + " more</div>" : "");
  var as = results.querySelectorAll("a[data-k]");
  for (var i = 0; i < as.length; i++) as[i].onclick = function(){ show(this.getAttribute("data-k"), true); };
}
search.addEventListener("input", runSearch);
search.addEventListener("keydown", function(ev){
  if (ev.key !== "Enter" || !matches.length) return;
  at = (at + 1) % matches.length; countBox.textContent = (at + 1) + " of " + matches.length;
  show(matches[at], true);
});

function shapeOf(el){ return el.querySelector("path, polygon, ellipse"); }
function colour(i){
  var ov = i >= 0 ? data.overlays[i] : null;
  Object.keys(els).forEach(function(k){
    var s = shapeOf(els[k]); if (!s) return;
    s.setAttribute("fill", ov ? (ov.fills[k] || ov.neutral) : data.nodes[k].fill);
  });
  var h = "";
  if (ov) {
    h = "<b>" + esc(ov.name) + "</b>" + ov.legend.map(function(r){
      return "<div><span class=sw style=\"background:" + esc(r[0]) + "\"></span>" + esc(r[1]) + "</div>"; }).join("")
      + (ov.note ? "<div><small>" + esc(ov.note) + "</small></div>" : "")
      + (ov.first ? "<div><a data-k=\"" + ov.first + "\">go to " + esc(data.nodes[ov.first].name) + "</a></div>" : "");
  }
  if (data.warnings.length) h += "<div><small>" + data.warnings.map(esc).join("<br>") + "</small></div>";
  legendBox.innerHTML = h;
  var as = legendBox.querySelectorAll("a[data-k]");
  for (var j = 0; j < as.length; j++) as[j].onclick = function(){ show(this.getAttribute("data-k"), true); };
}
if (data.overlays.length) {
  data.overlays.forEach(function(ov, i){ var o = document.createElement("option"); o.value = i;
    o.textContent = "colour: " + ov.name; select.appendChild(o); });
  var o = document.createElement("option"); o.value = -1; o.textContent = "colour: opcode"; select.appendChild(o);
  select.onchange = function(){ colour(Number(select.value)); };
  colour(0);
} else { select.style.display = "none"; colour(-1); }
function listAll(){
  var keys = Object.keys(data.nodes);
  results.innerHTML = "<b>nodes</b>" + keys.slice(0, 500).map(function(k){
    return "<div><a data-k=\"" + k + "\">" + esc(data.nodes[k].name) + "</a> <small>" + esc(data.nodes[k].opcode) + "</small></div>";
  }).join("") + (keys.length > 500 ? "<div>... " + (keys.length - 500) + " more: search for them</div>" : "");
  var as = results.querySelectorAll("a[data-k]");
  for (var i = 0; i < as.length; i++) as[i].onclick = function(){ show(this.getAttribute("data-k"), false); };
}
if (!svg) listAll();
// page.html#search=TEXT highlights the matches and shows the first; #node=NAME shows that node
(function(){
  var h = decodeURIComponent((location.hash || "").slice(1)), m = /^(search|node)=(.*)$/.exec(h);
  if (!m) return;
  if (m[1] === "search") { search.value = m[2]; runSearch(); if (matches.length) { at = 0; show(matches[0], true); } }
  else { Object.keys(data.nodes).forEach(function(k){ if (data.nodes[k].name === m[2] || data.nodes[k].id === m[2]) show(k, true); }); }
})();
window.hloGraph = {data: data, show: show, search: function(q){ search.value = q; runSearch(); return matches.slice(); },
  fit: fit, colour: colour};
})();
"""
