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
    // Anything changed in any form since the page was drawn: a filter being edited as
    // much as a decision being written.
    var fields = document.querySelectorAll("form input:not([type=hidden]), form textarea");
    for (var i = 0; i < fields.length; i += 1) {
      if (fields[i].value !== fields[i].defaultValue) {
        return true;
      }
    }
    var selects = document.querySelectorAll("form select");
    for (var j = 0; j < selects.length; j += 1) {
      // A list drawn with no option marked selected shows its first one.
      var drawn = 0;
      for (var k = 0; k < selects[j].options.length; k += 1) {
        if (selects[j].options[k].defaultSelected) {
          drawn = k;
        }
      }
      if (selects[j].selectedIndex !== drawn) {
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
