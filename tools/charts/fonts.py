"""Which font the charts draw with: one that has CJK glyphs when the machine has one, else DejaVu Sans.

Chinese labels (database names, cost centres, titles) are common on DingTalk, and
matplotlib's bundled DejaVu Sans draws them as empty boxes. The lookup runs once
per process (registering a font file with matplotlib's font manager is not free);
when no CJK font is found it logs one warning and the charts still render.
"""

from __future__ import annotations

import functools
import logging
from dataclasses import dataclass
from pathlib import Path

from matplotlib import font_manager

__all__ = ["CJK_CANDIDATE_FILES", "CJK_FAMILIES", "FALLBACK_FAMILY", "ChartFonts", "chart_fonts", "cjk_available"]

log = logging.getLogger(__name__)

# Debian's fonts-noto-cjk first (what .ci/run installs), then other common packagings.
CJK_CANDIDATE_FILES = (
    "/usr/share/fonts/opentype/noto/NotoSansCJK-Regular.ttc",
    "/usr/share/fonts/noto-cjk/NotoSansCJK-Regular.ttc",
    "/usr/share/fonts/google-noto-cjk/NotoSansCJK-Regular.ttc",
    "/usr/share/fonts/truetype/wqy/wqy-microhei.ttc",
    "/usr/share/fonts/truetype/wqy/wqy-zenhei.ttc",
)
# Simplified Chinese first: the same Noto file also answers to JP/KR/TC, whose glyph shapes differ slightly.
CJK_FAMILIES = (
    "Noto Sans CJK SC",
    "Noto Sans CJK",
    "Source Han Sans SC",
    "Source Han Sans CN",
    "WenQuanYi Micro Hei",
    "WenQuanYi Zen Hei",
)
FALLBACK_FAMILY = "DejaVu Sans"


@dataclass(frozen=True)
class ChartFonts:
    """The font families a chart asks for, in fallback order (matplotlib picks per glyph)."""

    families: tuple[str, ...]
    """DejaVu Sans for Latin text and digits, then the CJK family when one was found."""
    cjk_family: str | None
    """The family that draws CJK glyphs, or None when the machine has none."""

    @property
    def has_cjk(self) -> bool:
        """Whether CJK labels will draw as glyphs rather than boxes."""
        return self.cjk_family is not None

    @classmethod
    def without_cjk(cls) -> ChartFonts:
        """DejaVu Sans alone: what a machine without a CJK font gets."""
        return cls(families=(FALLBACK_FAMILY,), cjk_family=None)


def _known_families() -> set[str]:
    return {entry.name for entry in font_manager.fontManager.ttflist}


def _add_bold_sibling(regular: str) -> None:
    """Register the bold face beside a regular one (titles are bold), when the package ships it."""
    bold = Path(regular.replace("-Regular.", "-Bold."))
    if bold.name != Path(regular).name and bold.is_file():
        try:
            font_manager.fontManager.addfont(str(bold))
        except (OSError, RuntimeError, ValueError) as exc:
            log.info("bold chart font %s could not be loaded: %s", bold, exc)


def _find_cjk_family() -> str | None:
    known = _known_families()
    for family in CJK_FAMILIES:
        if family in known:
            return family
    # matplotlib's font cache may predate the font package (or skip .ttc files): register the file ourselves.
    for candidate in CJK_CANDIDATE_FILES:
        if Path(candidate).is_file():
            try:
                font_manager.fontManager.addfont(candidate)
            except (OSError, RuntimeError, ValueError) as exc:
                log.warning("chart font %s could not be loaded: %s", candidate, exc)
                continue
            _add_bold_sibling(candidate)
            known = _known_families()
            for family in CJK_FAMILIES:
                if family in known:
                    return family
    return None


@functools.cache
def chart_fonts() -> ChartFonts:
    """The fonts charts use on this machine, looked up (and registered with matplotlib) once per process."""
    family = _find_cjk_family()
    if family is None:
        log.warning(
            "no CJK font found (install Debian's fonts-noto-cjk): charts fall back to %s and Chinese, Japanese "
            "or Korean labels will draw as empty boxes",
            FALLBACK_FAMILY,
        )
        return ChartFonts.without_cjk()
    return ChartFonts(families=(FALLBACK_FAMILY, family), cjk_family=family)


def cjk_available() -> bool:
    """Whether this machine has a font that draws CJK labels in charts."""
    return chart_fonts().has_cjk
