from capr.cli import main

main()
