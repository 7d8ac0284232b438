"""Keyboard focus is visible on every page of the backoffice: chromium tabs through each page as a
keyboard user does, and for every element that takes focus the test reads the outline chromium
draws (computed style) and the colour around it, and computes their contrast (WCAG 2's relative
luminance): at least 3:1 (WCAG 1.4.11, non-text contrast).
"""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

from payrail_test_support.backoffice import ENABLED, name, new_page, take_screenshot

pytestmark = pytest.mark.slow  # a browser

FOCUSED = """() => {
  const element = document.activeElement;
  if (element.dataset.focusSeen) return null;  // Tab came round to the first element again
  element.dataset.focusSeen = "yes";
  const style = getComputedStyle(element);
  // The colour the outline is drawn against: the first ancestor that paints a background.
  let around = "rgb(255, 255, 255)";
  for (let node = element.parentElement; node; node = node.parentElement) {
    const colour = getComputedStyle(node).backgroundColor;
    if (colour !== "rgba(0, 0, 0, 0)" && colour !== "transparent") { around = colour; break; }
  }
  return {
    what: `${element.tagName.toLowerCase()} ${element.id || element.getAttribute("href") || element.textContent.trim().slice(0, 30)}`,
    style: style.outlineStyle, width: parseFloat(style.outlineWidth), colour: style.outlineColor, around,
  };
}"""


def luminance(colour: str) -> float:
    red, green, blue = (int(value) / 255 for value in re.findall(r"\d+(?:\.\d+)?", colour)[:3])
    linear = [c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4 for c in (red, green, blue)]
    return 0.2126 * linear[0] + 0.7152 * linear[1] + 0.0722 * linear[2]


def contrast(first: str, second: str) -> float:
    lighter, darker = sorted((luminance(first), luminance(second)), reverse=True)
    return (lighter + 0.05) / (darker + 0.05)


def focus_outlines(page, limit: int = 60) -> list[dict]:
    """Every element Tab reaches on the page, in order, with its outline."""
    found = []
    # Computed styles are the stylesheet's once it has loaded (the load event); before, chromium's
    # own focus ring (seen after a save's redirect on a busy machine, the page's status already shown).
    page.wait_for_load_state("load")
    page.locator("body").focus()
    for _ in range(limit):
        page.keyboard.press("Tab")
        focused = page.evaluate(FOCUSED)
        if focused is None:
            break
        if not focused["what"].startswith("body"):
            found.append(focused)
    return found


def assert_visible_focus(page, at_least: int) -> list[dict]:
    outlines = focus_outlines(page)
    assert len(outlines) >= at_least, outlines
    for outline in outlines:
        assert outline["style"] == "solid" and outline["width"] >= 2, outline
        ratio = contrast(outline["colour"], outline["around"])
        assert ratio >= 3, f"{outline['what']}: outline {outline['colour']} on {outline['around']} is {ratio:.2f}:1"
    return outlines


def test_every_focusable_element_of_every_page_has_an_outline_of_3_to_1(browser, backoffice, page, tmp_path):
    outlines = assert_visible_focus(page, at_least=8)  # the records list: header, filter, records
    assert any(o["what"] == "button Sign out" for o in outlines), outlines  # on the dark header too

    page.get_by_role("link", name=name(ENABLED), exact=True).click()
    page.get_by_label("Guidance").fill(ENABLED["guidance"] + "\nEdited.")
    page.get_by_role("button", name="Save").click()
    expect(page.get_by_role("status")).to_contain_text("as version 2")
    outlines = assert_visible_focus(page, at_least=12)  # the form, Try a query, history with Restore
    assert any(o["what"] == "button Restore" for o in outlines), outlines
    page.get_by_label("Provider").focus()
    take_screenshot(page, tmp_path, "backoffice-focus.png")

    page.goto("/import")
    assert_visible_focus(page, at_least=5)

    signed_out = new_page(browser, backoffice)
    signed_out.goto("/sign-in")
    assert_visible_focus(signed_out, at_least=3)
    signed_out.context.close()
