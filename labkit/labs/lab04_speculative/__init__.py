"""Lab 04 (speculative decoding): ``exercises`` (hidden checks) and ``solutions`` (reference solutions); measurements, views and quiz join as the lab is built."""
