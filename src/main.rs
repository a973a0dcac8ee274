fn main() {
    println!("onlyone {}", env!("CARGO_PKG_VERSION"));
}
