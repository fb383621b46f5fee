"""Lab 02 (PagedAttention): ``exercises`` (hidden checks) and ``solutions`` (reference solutions); measurements, views and quiz join as the lab is built."""
