// The live feed's export form (auditors): it sends the filter bar's filters as they are now (the
// bar is applied without reloading the page, so they are read at submission, not rendered into
// the form), with its own since/until; empty fields are left out, as the API refuses an empty
// value where it expects a time.
(function () {
  "use strict";
  const form = document.getElementById("export");
  const bar = document.getElementById("filters");
  if (!form || !bar) return;
  form.addEventListener("formdata", (event) => {
    const data = event.formData;
    for (const [name, value] of new FormData(bar)) {
      if (name !== "view" && String(value).trim()) data.set(name, String(value).trim());
    }
    for (const name of ["since", "until"]) {
      if (!String(data.get(name) || "").trim()) data.delete(name);
    }
  });
})();
