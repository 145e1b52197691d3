(function () {
  var root = document.documentElement;
  root.classList.add("js");
  var bad = [];
  document.addEventListener("securitypolicyviolation", function (e) {
    bad.push(e.violatedDirective + " " + (e.blockedURI || "inline"));
    root.setAttribute("data-csp-violations", bad.join("; "));
  });
  var failed = root.getAttribute("data-chart-failed") || "";
  // ast: Vega's expression interpreter, so the CSP needs no 'unsafe-eval'; the embed and
  // tooltip default styles would inject <style> elements the CSP refuses (report.css has them).
  var opts = {actions: false, renderer: "svg", mode: "vega-lite", ast: true, defaultStyle: false,
              tooltip: {disableDefaultStyle: true}};
  var specs = document.querySelectorAll("script.vl-spec");
  Array.prototype.forEach.call(specs, function (s) {
    var el = document.getElementById(s.getAttribute("data-target"));
    if (!el || typeof vegaEmbed !== "function") { return; }
    vegaEmbed(el, JSON.parse(s.textContent), opts).then(function () {
      el.setAttribute("data-rendered", "1");
    }).catch(function (err) {
      el.classList.add("chart-error");
      el.textContent = failed + String(err && err.message || err);
    });
  });
  var pop = document.getElementById("numpop");
  if (!pop) { return; }
  var current = null;
  function place(el) {
    var r = el.getBoundingClientRect();
    var w = pop.offsetWidth, h = pop.offsetHeight, m = 8;
    var left = Math.max(m, Math.min(r.left, window.innerWidth - w - m));
    var top = r.bottom + 6;
    if (top + h > window.innerHeight - m && r.top - h - 6 > m) { top = r.top - h - 6; }
    pop.style.left = left + "px";
    pop.style.top = top + "px";
  }
  function show(el) {
    var src = el.querySelector(".pop");
    if (!src) { return; }
    current = el;
    while (pop.firstChild) { pop.removeChild(pop.firstChild); }
    Array.prototype.forEach.call(src.childNodes, function (c) { pop.appendChild(c.cloneNode(true)); });
    pop.hidden = false;
    pop.classList.add("open");
    el.setAttribute("aria-describedby", "numpop");
    place(el);
  }
  function hide(el) {
    if (el && el !== current) { return; }
    if (current) { current.removeAttribute("aria-describedby"); }
    current = null;
    pop.hidden = true;
    pop.classList.remove("open");
  }
  function num(e) { return e.target && e.target.closest ? e.target.closest(".num") : null; }
  document.addEventListener("focusin", function (e) { var el = num(e); if (el) { show(el); } });
  document.addEventListener("focusout", function (e) { var el = num(e); if (el) { hide(el); } });
  document.addEventListener("mouseover", function (e) { var el = num(e); if (el && el !== current) { show(el); } });
  document.addEventListener("mouseout", function (e) {
    var el = num(e);
    if (el && !(e.relatedTarget && el.contains(e.relatedTarget)) && document.activeElement !== el) { hide(el); }
  });
  document.addEventListener("keydown", function (e) { if (e.key === "Escape") { hide(current); } });
  window.addEventListener("scroll", function () { if (current) { place(current); } }, {passive: true});
})();
