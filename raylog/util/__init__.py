"""Small plain-Python helpers every layer uses (clocks, backoffs): no Ray, no raylog imports."""
