"""Everything that changes daphne's, autobahn's or Twisted's behaviour: declared, version-checked, switched by QIM_SERVER_TUNING.

Each replacement is declared once in catalog.py (what it replaces, the versions it was verified
on); tuning.py installs what verifies, once, from qim/asgi.py. Nothing outside this package
sets an attribute on those libraries."""
