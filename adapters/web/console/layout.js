// The console's frame on a phone: the conversation list is a drawer (☰ opens and closes it; Escape, a tap
// outside it or picking a conversation closes it) and the header's pages and buttons sit behind ⋯ (closed the
// same ways). On a wide window both are simply shown and the two buttons hidden: the CSS decides by the width,
// and crossing it closes whatever was open.
"use strict";

const LAYOUT_NARROW = "(max-width: 700px)";

function layoutDrawerOpen() {
  return document.getElementById("page-chat").classList.contains("drawer-open");
}

function layoutMenuOpen() {
  return document.querySelector("header.top").classList.contains("menu-open");
}

/** Open or close the conversation drawer. */
function layoutSetDrawer(open) {
  document.getElementById("page-chat").classList.toggle("drawer-open", open);
  document.getElementById("drawer-backdrop").hidden = !open;
  document.getElementById("drawer-toggle").setAttribute("aria-expanded", String(open));
  if (open) layoutSetMenu(false);
}

/** Open or close the header's overflow menu. */
function layoutSetMenu(open) {
  document.querySelector("header.top").classList.toggle("menu-open", open);
  document.getElementById("menu-toggle").setAttribute("aria-expanded", String(open));
  if (open) layoutSetDrawer(false);
}

/** Close the drawer and the menu (a conversation picked, a page changed, Escape). */
function bgLayoutClose() {
  layoutSetDrawer(false);
  layoutSetMenu(false);
}

/** The ☰ button only serves the Chat page. */
function bgLayoutPage(page) {
  document.getElementById("drawer-toggle").hidden = page !== "chat";
  bgLayoutClose();
}

function bgLayoutSetup() {
  const drawerToggle = document.getElementById("drawer-toggle");
  const menuToggle = document.getElementById("menu-toggle");
  const menu = document.getElementById("menu");
  drawerToggle.addEventListener("click", () => layoutSetDrawer(!layoutDrawerOpen()));
  menuToggle.addEventListener("click", () => layoutSetMenu(!layoutMenuOpen()));
  document.getElementById("drawer-backdrop").addEventListener("click", () => layoutSetDrawer(false));
  // A choice in the menu is made: the menu goes (the theme and language switches act first).
  menu.addEventListener("click", (event) => {
    if (event.target.closest("a, button")) layoutSetMenu(false);
  });
  document.addEventListener("pointerdown", (event) => {
    if (layoutMenuOpen() && !menu.contains(event.target) && !menuToggle.contains(event.target)) layoutSetMenu(false);
  });
  document.addEventListener("keydown", (event) => {
    if (event.key !== "Escape" || !(layoutDrawerOpen() || layoutMenuOpen())) return;
    const back = layoutDrawerOpen() ? drawerToggle : menuToggle;
    bgLayoutClose();
    back.focus();
  });
  matchMedia(LAYOUT_NARROW).addEventListener("change", bgLayoutClose);
}
