// Live refresh for pages that ask for it (data-refresh seconds on <body>): the page is
// fetched again unless the operator is typing into one of its forms or has opened a detail.
(function () {
  "use strict";
  var seconds = Number(document.body.dataset.refresh || 0);
  if (!seconds) {
    return;
  }
  function busy() {
    var active = document.activeElement;
    if (active && /^(INPUT|TEXTAREA|SELECT)$/.test(active.tagName)) {
      return true;
    }
    var fields = document.querySelectorAll("form[method=post] input:not([type=hidden]), textarea");
    for (var i = 0; i < fields.length; i += 1) {
      if (fields[i].value) {
        return true;
      }
    }
    return document.querySelector("details[open]:not([data-static])") !== null;
  }
  window.setInterval(function () {
    if (!busy() && document.visibilityState === "visible") {
      window.location.reload();
    }
  }, seconds * 1000);
})();
