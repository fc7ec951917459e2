package dev.wirelint.example.blog;

import java.util.Optional;
import org.springframework.stereotype.Service;

/** Writing: authors join, posts are published and renamed. */
@Service
public class Blog {
  private final AuthorRepository authors;
  private final PostRepository posts;

  public Blog(AuthorRepository authors, PostRepository posts) {
    this.authors = authors;
    this.posts = posts;
  }

  public Author join(String handle, String name) {
    return authors.save(new Author(handle, name));
  }

  public Post publish(Author author, String title, String body) {
    return posts.save(new Post(author.getId(), title, body));
  }

  public Optional<Post> post(String id) {
    return posts.findById(id);
  }

  public Post rename(String id, String title) {
    Post post = posts.findById(id).orElseThrow();
    post.setTitle(title);
    return posts.save(post);
  }
}
