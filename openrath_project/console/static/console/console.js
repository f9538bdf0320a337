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
})();
