"""Lab 03 (static vs continuous batching): ``exercises`` (hidden checks) and ``solutions`` (reference solutions); measurements, views and quiz join as the lab is built."""
