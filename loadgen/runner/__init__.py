"""Running a profile: the composition root (``api``), the driver and its load shapes, and the
client's measurement of its own health. Named ``runner`` so that ``loadgen.run`` stays the
public function."""
