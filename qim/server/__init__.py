"""Everything that changes daphne's, autobahn's or Twisted's behaviour: declared, version-checked, switched by QIM_SERVER_TUNING."""
