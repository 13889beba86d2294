"""The README's and docs' tables are generated from the code they describe."""
import re

from codegen.ops import markdown_table
from conftest import ROOT
from fusion_delegate.options import FusionOptions

README = (ROOT / "README.md").read_text()
WHAT_IT_FUSES = (ROOT / "docs" / "what_it_fuses.md").read_text()


def test_readme_op_table_is_generated_from_ops():
    block = re.search(r"<!-- ops:begin[^>]*-->\n(.*?)\n<!-- ops:end -->", WHAT_IT_FUSES, re.S)
    assert block and block.group(1) == markdown_table()


def test_readme_lists_every_option():
    documented = re.findall(r"^\| `(\w+)` \|", README, re.M)
    assert documented == FusionOptions.names()
