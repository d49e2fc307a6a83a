"""One conversation model for every dialect Reef records (:mod:`.model`), its
converters (:mod:`.messages`, :mod:`.responses`, :mod:`.streams`, :mod:`.records`) and
the canonical form session matching compares (:mod:`.canonical`)."""
