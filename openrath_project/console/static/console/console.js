// Small helpers of every console page (no framework, nothing loaded from outside).
(function () {
  "use strict";
  // The tenant and project switcher submits as soon as a choice changes.
  document.querySelectorAll("select[data-autosubmit]").forEach(function (select) {
    select.addEventListener("change", function () {
      if (select.name === "tenant") {
        var project = select.form.querySelector("select[name=project]");
        if (project) { project.value = ""; }
      }
      select.form.submit();
    });
  });

  // Keyboard: j / k move between the cards of a queue (approvals, effects) when no field has
  // the focus; Tab goes on into the focused card's form.
  document.addEventListener("keydown", function (event) {
    if (event.altKey || event.ctrlKey || event.metaKey) { return; }
    if (event.key !== "j" && event.key !== "k") { return; }
    var target = event.target;
    if (target && target.closest && target.closest("input, textarea, select, [contenteditable]")) { return; }
    var cards = Array.prototype.slice.call(document.querySelectorAll("[data-keynav]"));
    if (!cards.length) { return; }
    var current = cards.indexOf(document.activeElement && document.activeElement.closest ?
      document.activeElement.closest("[data-keynav]") : null);
    var next = event.key === "j" ? Math.min(cards.length - 1, current + 1) : Math.max(0, current - 1);
    cards[next].focus();
    cards[next].scrollIntoView({ block: "start" });
    event.preventDefault();
  });
})();
