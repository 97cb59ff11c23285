

# a candidate may not edit the frozen reference
